#!/usr/bin/env bash
# Installs what rsfcd needs (Debian 12 packages) and builds it:
#   build/rsfcd          the daemon (and unit tests, benchmark, lab tools) - release
#   build-asan/          the unit tests again under ASan + UBSan
#   build-fuzz/          the libFuzzer harness over parse + engine (clang; test/fuzz/run.sh)
# Run as root on a fresh machine: sudo ./setup.sh
set -euo pipefail
cd "$(dirname "$0")"

PACKAGES=(build-essential cmake ninja-build pkg-config clang-format
  libnetfilter-queue-dev libmnl-dev libevent-dev libyaml-cpp-dev libgtest-dev libbenchmark-dev
  python3 python3-scapy python3-pytest python3-yaml python3-matplotlib
  iptables iproute2 iperf3 iputils-ping tcpdump curl procps)

# The fuzz harness (build-fuzz/, test/fuzz/run.sh): clang and its libFuzzer runtime. Not in
# the docker lab's image, which builds only the daemon and the lab tools.
FUZZ_PACKAGES=(clang libclang-rt-14-dev)

# The docker lab (docker/run-lab.sh, run by test/run-all.sh) on this host: Debian's engine
# and compose unless some engine / compose is installed already (docker.io would replace
# Docker's own docker-ce packages), and debootstrap for the base image. Not in the image.
DOCKER_LAB_PACKAGES=(debootstrap)
command -v dockerd >/dev/null || DOCKER_LAB_PACKAGES+=(docker.io)
docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null ||
  DOCKER_LAB_PACKAGES+=(docker-compose)

missing=()
for p in "${PACKAGES[@]}" "${FUZZ_PACKAGES[@]}" "${DOCKER_LAB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs"
if [[ "${RSFC_SKIP_ASAN:-0}" != 1 ]]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DRSFC_SANITIZE=ON >/dev/null
  cmake --build build-asan -j"$jobs"
fi
if [[ "${RSFC_SKIP_FUZZ:-0}" != 1 ]]; then
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER=clang++ -DRSFC_FUZZ=ON >/dev/null
  cmake --build build-fuzz -j"$jobs" --target engine_fuzz rsfc-fuzz-corpus
fi
echo "setup: built $(pwd)/build/rsfcd"
