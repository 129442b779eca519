//! What a model directory holds: its version directories, which of them the version policy
//! selects, and a fingerprint that tells polling whether anything changed.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;
use std::time::UNIX_EPOCH;

use crate::config::{ModelConfig, pb::model_version_policy::PolicyChoice};

/// Numeric subdirectories of a model directory, ascending.
pub fn version_dirs(dir: &Path) -> Vec<i64> {
    let mut versions: Vec<i64> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i64>().ok()))
        .filter(|&v| v >= 0)
        .collect();
    versions.sort_unstable();
    versions
}

/// Applies the version policy to the versions found on disk.
pub fn select_versions(config: &ModelConfig, available: &[i64]) -> Vec<i64> {
    match config.version_policy.as_ref().and_then(|p| p.policy_choice.as_ref()) {
        Some(PolicyChoice::All(_)) => available.to_vec(),
        Some(PolicyChoice::Specific(s)) => available.iter().copied().filter(|v| s.versions.contains(v)).collect(),
        Some(PolicyChoice::Latest(l)) => {
            let keep = usize::try_from(l.num_versions).unwrap_or(1);
            available[available.len().saturating_sub(keep)..].to_vec()
        }
        None => available.last().copied().into_iter().collect(),
    }
}

/// A cheap hash of everything that makes a reload necessary: file names, sizes and mtimes two
/// levels deep (config.pbtxt, labels, version directories and their files).
pub fn fingerprint_dir(dir: &Path) -> u64 {
    fn walk(dir: &Path, depth: u32, hasher: &mut DefaultHasher) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            entry.file_name().hash(hasher);
            if let Ok(meta) = entry.metadata() {
                meta.len().hash(hasher);
                meta.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).hash(hasher);
                if meta.is_dir() && depth > 0 {
                    walk(&entry.path(), depth - 1, hasher);
                }
            }
        }
    }
    let mut hasher = DefaultHasher::new();
    walk(dir, 1, &mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::pb;

    fn with_policy(policy: PolicyChoice) -> ModelConfig {
        ModelConfig {
            version_policy: Some(pb::ModelVersionPolicy { policy_choice: Some(policy) }),
            ..Default::default()
        }
    }

    #[test]
    fn version_policies_select_like_triton() {
        let available = [1, 2, 3];
        let latest2 = with_policy(PolicyChoice::Latest(pb::model_version_policy::Latest { num_versions: 2 }));
        assert_eq!(select_versions(&latest2, &available), vec![2, 3]);
        let all = with_policy(PolicyChoice::All(pb::model_version_policy::All {}));
        assert_eq!(select_versions(&all, &available), vec![1, 2, 3]);
        let specific =
            with_policy(PolicyChoice::Specific(pb::model_version_policy::Specific { versions: vec![1, 3, 7] }));
        assert_eq!(select_versions(&specific, &available), vec![1, 3]);
        assert_eq!(select_versions(&ModelConfig::default(), &available), vec![3]);
        assert!(select_versions(&latest2, &[]).is_empty());
    }
}
