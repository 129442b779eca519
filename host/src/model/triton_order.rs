//! The order Triton's core visits a request's inputs in.
//!
//! Triton keeps a request's inputs in a `std::unordered_map<std::string, Input>` and checks
//! them by iterating it, so when several inputs are wrong the one it names, and the order of
//! the names in "Got input(s) [...]", follow libstdc++'s hash table rather than the request.
//! Clients and tests that compare error text see that order, so it is reproduced here:
//! libstdc++'s `std::hash<std::string>` (`_Hash_bytes`, seed `0xc70f6907`), its prime rehash
//! policy (13 buckets for the first element, then growth past a load factor of 1), and its
//! singly linked node list (a node whose bucket is empty goes to the front of the list; one whose
//! bucket has nodes goes to the front of that bucket's run). Checked against `g++` 12 with the
//! orders in the tests below.

/// Bucket counts libstdc++ uses as a map grows one insertion at a time: `(size that triggers
/// the growth, new bucket count)`, read from `bucket_count()` with g++ 12.
const GROWTH: [(usize, usize); 10] = [
    (1, 13),
    (14, 29),
    (30, 59),
    (60, 127),
    (128, 257),
    (258, 541),
    (542, 1109),
    (1110, 2357),
    (2358, 5087),
    (5088, 10273),
];

/// libstdc++'s `std::hash<std::string>` on 64-bit targets (`_Hash_bytes`, a MurmurHash2 variant).
fn hash_bytes(bytes: &[u8]) -> u64 {
    const MUL: u64 = (0xc6a4_a793_u64 << 32) + 0x5bd1_e995;
    const SEED: u64 = 0xc70f_6907;
    let shift_mix = |v: u64| v ^ (v >> 47);
    let mut hash = SEED ^ (bytes.len() as u64).wrapping_mul(MUL);
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let data = shift_mix(u64::from_le_bytes(word).wrapping_mul(MUL)).wrapping_mul(MUL);
        hash ^= data;
        hash = hash.wrapping_mul(MUL);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        let data = tail.iter().rev().fold(0u64, |acc, &b| (acc << 8) + u64::from(b));
        hash ^= data;
        hash = hash.wrapping_mul(MUL);
    }
    shift_mix(shift_mix(hash).wrapping_mul(MUL))
}

/// What a bucket points at: the node before its first node (libstdc++ stores "before" pointers).
#[derive(Clone, Copy)]
enum Before {
    Head,
    Node(usize),
}

struct Table {
    hashes: Vec<u64>,
    next: Vec<Option<usize>>,
    head: Option<usize>,
    buckets: Vec<Option<Before>>,
}

impl Table {
    fn after(&self, before: Before) -> Option<usize> {
        match before {
            Before::Head => self.head,
            Before::Node(i) => self.next[i],
        }
    }

    fn set_after(&mut self, before: Before, node: Option<usize>) {
        match before {
            Before::Head => self.head = node,
            Before::Node(i) => self.next[i] = node,
        }
    }

    fn bucket(&self, node: usize) -> usize {
        (self.hashes[node] % self.buckets.len() as u64) as usize
    }

    /// Links `node` in as `_M_insert_bucket_begin` does.
    fn link(&mut self, node: usize) {
        let bucket = self.bucket(node);
        match self.buckets[bucket] {
            Some(before) => {
                self.next[node] = self.after(before);
                self.set_after(before, Some(node));
            }
            None => {
                self.next[node] = self.head;
                self.head = Some(node);
                if let Some(old_first) = self.next[node] {
                    let old_bucket = self.bucket(old_first);
                    self.buckets[old_bucket] = Some(Before::Node(node));
                }
                self.buckets[bucket] = Some(Before::Head);
            }
        }
    }

    /// Redistributes the nodes as `_M_rehash_aux` does for unique keys.
    fn rehash(&mut self, bucket_count: usize) {
        self.buckets = vec![None; bucket_count];
        let mut node = self.head.take();
        let mut first_bucket = 0;
        while let Some(i) = node {
            node = self.next[i];
            let bucket = self.bucket(i);
            match self.buckets[bucket] {
                None => {
                    self.next[i] = self.head;
                    self.head = Some(i);
                    self.buckets[bucket] = Some(Before::Head);
                    if self.next[i].is_some() {
                        self.buckets[first_bucket] = Some(Before::Node(i));
                    }
                    first_bucket = bucket;
                }
                Some(before) => {
                    self.next[i] = self.after(before);
                    self.set_after(before, Some(i));
                }
            }
        }
    }
}

/// The positions of `names` (distinct, in request order) in the order Triton iterates them.
pub fn triton_input_order<S: AsRef<str>>(names: &[S]) -> Vec<usize> {
    let mut table = Table {
        hashes: names.iter().map(|n| hash_bytes(n.as_ref().as_bytes())).collect(),
        next: vec![None; names.len()],
        head: None,
        buckets: vec![None],
    };
    for node in 0..names.len() {
        let size = node + 1;
        if let Some(&(_, count)) = GROWTH.iter().find(|&&(at, _)| at == size) {
            table.rehash(count);
        } else if size > GROWTH[GROWTH.len() - 1].0 && size > table.buckets.len() {
            // Past any request this server accepts; keep growing, if not to libstdc++'s exact primes.
            table.rehash(size * 2 + 1);
        }
        table.link(node);
    }
    let mut order = Vec::with_capacity(names.len());
    let mut node = table.head;
    while let Some(i) = node {
        order.push(i);
        node = table.next[i];
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ordered(names: &[&str]) -> Vec<String> {
        triton_input_order(names).into_iter().map(|i| names[i].to_string()).collect()
    }

    fn words(text: &str) -> Vec<&str> {
        text.split(' ').collect()
    }

    #[test]
    fn the_hash_is_libstdcxx_std_hash() {
        // `std::hash<std::string>{}("INPUT0")` printed by g++ 12.
        assert_eq!(hash_bytes(b"INPUT0"), 2_526_639_154_658_133_543);
    }

    #[test]
    fn orders_match_tritons_and_gxx() {
        // Observed on Triton 2.51 ("Got input(s) [...]").
        assert_eq!(ordered(&["INPUT0", "INPUT1", "A"]), words("A INPUT1 INPUT0"));
        assert_eq!(ordered(&["A", "INPUT0", "INPUT1"]), words("INPUT1 INPUT0 A"));
        assert_eq!(ordered(&["a", "b", "c", "d", "e", "f"]), words("f e c b d a"));
        // Printed by iterating a std::unordered_map filled in this order with g++ 12.
        let sixteen: Vec<String> = (0..16).map(|i| format!("INPUT{i}")).collect();
        let sixteen: Vec<&str> = sixteen.iter().map(String::as_str).collect();
        assert_eq!(
            ordered(&sixteen),
            words(
                "INPUT15 INPUT14 INPUT13 INPUT0 INPUT1 INPUT7 INPUT2 INPUT5 INPUT9 INPUT3 INPUT4 INPUT6 INPUT10 \
                 INPUT11 INPUT8 INPUT12"
            )
        );
        let many: Vec<String> = (0..41).map(|i| format!("in_{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(
            ordered(&many),
            words(
                "in_40 in_39 in_38 in_37 in_36 in_34 in_32 in_31 in_11 in_1 in_14 in_19 in_21 in_12 in_35 in_20 \
                 in_10 in_27 in_9 in_33 in_7 in_3 in_2 in_6 in_16 in_4 in_22 in_5 in_0 in_13 in_29 in_15 in_17 \
                 in_30 in_23 in_24 in_25 in_18 in_26 in_8 in_28"
            )
        );
        assert_eq!(
            ordered(&["x", "longer_name_than_eight_bytes", "", "BOGUS"]),
            vec!["BOGUS", "", "longer_name_than_eight_bytes", "x"]
        );
    }
}
