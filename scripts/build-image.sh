#!/usr/bin/env bash
# Builds Tessera's OCI image FROM scratch, without a Docker daemon (buildah, chroot isolation, vfs
# storage), into target/image/tessera.oci.tar (an oci-archive that podman, skopeo and any registry
# push take). Prints the image's size.
#
# What is in it, and nothing else:
#   /opt/tessera/bin/tessera        the stripped release server (no TorchScript backend: libtorch
#                                   alone is ~1 GB; build your own with --features torch for that)
#   /opt/tessera/bin/tritonserver   -> tessera; run under that name it is `tessera serve` with
#                                   Triton's flags, so `tritonserver --model-repository=...` works
#   /opt/tessera/lib/               libonnxruntime from the onnxruntime PyPI wheel (found by the
#                                   server next to ../lib of its executable)
#   /opt/tessera/bin/entrypoint     execs its arguments; arguments that start with `-` get
#                                   `tritonserver` put in front (KServe passes `tritonserver ...`
#                                   as args, ModelMesh runs `/bin/sh -c "... exec tritonserver ..."`)
#   /bin/busybox and its applets    /bin/sh, mkdir, chmod, ... from Debian's busybox-static
#   /usr/bin/curl                   Debian's curl, for exec probes (ModelMesh's liveness probe)
#   /lib*, /usr/lib*                the shared libraries the three need (their ldd closure)
#   /etc/passwd, /etc/group         user and group 1000 (tessera), the image's default user
# It runs as user 1000 on a read-only root filesystem and needs no /dev/shm (only clients that
# register system shared memory regions use it).
#
# Usage: scripts/build-image.sh [--binary PATH]   (default: cargo build --release, then strip)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

BINARY=""
if [ "${1:-}" = "--binary" ]; then
  BINARY=$2
fi
bash scripts/setup-deploy-tools.sh
if [ -z "$BINARY" ]; then
  cargo build --quiet --release --bin tessera
  BINARY=target/release/tessera
fi
ORT_LIB=$(ls .venv/lib/python3*/site-packages/onnxruntime/capi/libonnxruntime.so.* | head -n 1)

OUT=target/image
ROOTFS=$OUT/rootfs
rm -rf "$ROOTFS"
mkdir -p "$ROOTFS"/{bin,etc,tmp,models,opt/tessera/bin,opt/tessera/lib,usr/bin}
chmod 1777 "$ROOTFS/tmp"

install -m 0755 "$BINARY" "$ROOTFS/opt/tessera/bin/tessera"
strip --strip-all "$ROOTFS/opt/tessera/bin/tessera"
ln -s tessera "$ROOTFS/opt/tessera/bin/tritonserver"
install -m 0644 "$ORT_LIB" "$ROOTFS/opt/tessera/lib/"
cat > "$ROOTFS/opt/tessera/bin/entrypoint" <<'EOF'
#!/bin/sh
# Runs the container's arguments; bare flags are the server's (`tritonserver` goes in front).
case "${1:-}" in
  -*) set -- tritonserver "$@" ;;
  "") set -- tritonserver --model-repository=/models ;;
esac
exec "$@"
EOF
chmod 0755 "$ROOTFS/opt/tessera/bin/entrypoint"

install -m 0755 /usr/bin/busybox "$ROOTFS/bin/busybox"
for applet in $(/usr/bin/busybox --list); do
  [ -e "$ROOTFS/bin/$applet" ] || ln -s busybox "$ROOTFS/bin/$applet"
done
install -m 0755 /usr/bin/curl "$ROOTFS/usr/bin/curl"

# The shared libraries each ELF file needs, at the paths the loader resolved them to here.
copy_libraries() {
  ldd "$1" | awk '/=> \// {print $3} /^\t\/[^ ]+ \(/ {print $1}' | while read -r lib; do
    [ -e "$ROOTFS$lib" ] && continue
    mkdir -p "$ROOTFS$(dirname "$lib")"
    cp -L "$lib" "$ROOTFS$lib"
  done
}
copy_libraries "$ROOTFS/opt/tessera/bin/tessera"
copy_libraries "$ROOTFS/opt/tessera/lib/$(basename "$ORT_LIB")"
copy_libraries /usr/bin/curl

printf 'root:x:0:0:root:/:/bin/sh\ntessera:x:1000:1000:tessera:/tmp:/bin/sh\n' > "$ROOTFS/etc/passwd"
printf 'root:x:0:\ntessera:x:1000:\n' > "$ROOTFS/etc/group"
printf 'hosts: files dns\n' > "$ROOTFS/etc/nsswitch.conf"
printf '127.0.0.1 localhost\n::1 localhost\n' > "$ROOTFS/etc/hosts"

VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
export STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot
buildah() { command buildah --storage-driver vfs "$@"; }
container=$(buildah from scratch)
trap 'buildah rm "$container" >/dev/null 2>&1 || true' EXIT
buildah copy --quiet "$container" "$ROOTFS/" / >/dev/null
buildah config \
  --env PATH=/opt/tessera/bin:/usr/bin:/bin \
  --entrypoint '["/opt/tessera/bin/entrypoint"]' \
  --cmd '["tritonserver","--model-repository=/models"]' \
  --user 1000:1000 \
  --workingdir /tmp \
  --port 8000 --port 8001 --port 8002 \
  --label org.opencontainers.image.title=tessera \
  --label "org.opencontainers.image.version=$VERSION" \
  --label org.opencontainers.image.description="Triton-compatible inference server with WebAssembly models" \
  "$container"
rm -f "$OUT/tessera.oci.tar"
buildah commit --quiet --format oci --disable-compression=false "$container" "oci-archive:$OUT/tessera.oci.tar:tessera:$VERSION" >/dev/null

# The compressed size (what a registry stores and a node pulls) and the unpacked size.
layer_bytes=$(skopeo inspect --raw "oci-archive:$OUT/tessera.oci.tar" \
  | python3 -c 'import json,sys; print(sum(l["size"] for l in json.load(sys.stdin)["layers"]))')
unpacked=$(du -sb "$ROOTFS" | cut -f1)
echo "image: $OUT/tessera.oci.tar ($((layer_bytes / 1000000)) MB compressed, $((unpacked / 1000000)) MB unpacked)"
