#!/usr/bin/env bash
# The docker lab in one command: lab/scenarios.py's 3G scenario in four containers (phone,
# base station, gateway with rsfcd, server), for the policies off, rsfc and the shipped
# configuration's (conf/rsfcd.yaml), printed as the namespace lab's table, then ONE JSON
# line (per policy: download_alone_mbps, download_with_upload_mbps,
# upload_with_download_mbps, rtt_under_load_p95_ms).
#
#   sudo docker/run-lab.sh                  # ~12 min on a machine that has everything
#   sudo docker/run-lab.sh --short          # the CI version: off and rsfc, ~3 min
#   sudo docker/run-lab.sh --purge          # also remove the images at the end
#   sudo docker/run-lab.sh --policies off,static:32768,rsfc --duration 60   (docker/lab.py)
#
# As root on a Debian 12 machine, from nothing:
#   1. packages   installs what is missing, Debian packages only: docker.io (engine and
#                 client) unless a dockerd is installed, docker-compose unless `docker
#                 compose` or `docker-compose` works, python3 + python3-yaml, and
#                 debootstrap when step 3 needs it.
#   2. engine     uses the engine that answers; else starts dockerd itself, without host
#                 iptables rules, IP forwarding or default bridge (--iptables=false
#                 --ip-forward=false --bridge=none; the lab needs none of them) and with a
#                 real-time budget for the delay element where the kernel wants one
#                 (--cpu-rt-runtime), and stops it at the end.
#   3. base image debian:12: present, or pulled, or (no registry) made with
#                 `debootstrap --variant=minbase bookworm` from the mirror apt uses.
#   4. lab image  rsfcd-lab:latest, built from a clean export of the work tree (git's
#                 tracked and unignored files: no build/ directory reaches the engine, which
#                 Engine 20.10's legacy builder would otherwise copy).
#   5. scenario   docker/lab.py: per policy and test, fresh containers and networks.
#   6. teardown   containers and networks (compose down), old rsfcd-lab images, the engine
#                 if this script started it (and the cgroup real-time budget it gave it),
#                 the host's allowed congestion controls; also on Ctrl-C or SIGTERM.
#                 Kept for the next run: rsfcd-lab:latest and debian:12 (--purge removes
#                 them) and the installed packages.
# Environment: RSFC_COMPOSE="docker compose" or "docker-compose" picks the compose command.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
IMAGE=rsfcd-lab:latest
BASE=debian:12
PROJECT=rsfclab
LABEL=org.rsfcd.lab=1

purge=0
lab_args=()
for a in "$@"; do
  case "$a" in
    --purge) purge=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) lab_args+=("$a") ;;
  esac
done
[[ $(id -u) == 0 ]] || { echo "run-lab: needs root (packages, dockerd, sysctls)" >&2; exit 1; }

work=$(mktemp -d /tmp/rsfc-run-lab.XXXXXX)
started_dockerd=""
dockerd_pid=""
rt_cgroup=""
driver_pid=""
compose=()
cc_before=$(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control)
step_no=0
step_name=""
step_t0=$SECONDS
t_start=$SECONDS
timings=()

say() { echo "[run-lab] $*" >&2; }
step() {
  end_step
  step_no=$((step_no + 1)); step_name="$1"; step_t0=$SECONDS
  say "[$step_no/6] $1"
}
end_step() {
  [[ -n "$step_name" ]] && timings+=("$step_name $((SECONDS - step_t0)) s")
  step_name=""
}

# ---- teardown (always) ------------------------------------------------------------------
# shellcheck disable=SC2317  # (run from the EXIT trap)
teardown() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  local failed="$step_name"
  step_no=5
  step "teardown"
  ((rc == 0)) || say "exit status $rc in step: ${failed:-?}"
  if [[ -n "$driver_pid" ]] && kill -0 "$driver_pid" 2>/dev/null; then
    kill -TERM "$driver_pid"; wait "$driver_pid"  # it takes its containers down itself
  fi
  if ((${#compose[@]})) && docker info >/dev/null 2>&1; then
    "${compose[@]}" -p "$PROJECT" -f "$REPO/docker/docker-compose.yml" down -t 3 \
      --remove-orphans >/dev/null 2>&1
    docker image prune -f --filter "label=$LABEL" >/dev/null 2>&1  # superseded builds
    if ((purge)); then
      docker rmi -f "$IMAGE" >/dev/null 2>&1
      docker rmi "$BASE" >/dev/null 2>&1 && say "removed the images $IMAGE and $BASE"
    fi
    left=$(docker ps -aq --filter "label=com.docker.compose.project=$PROJECT")
    [[ -z "$left" ]] || say "WARNING: containers left: $left"
  fi
  if [[ -n "$started_dockerd" ]]; then
    say "stopping the dockerd this script started (pid $dockerd_pid)"
    kill -TERM "$dockerd_pid" 2>/dev/null
    for _ in $(seq 60); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$dockerd_pid" 2>/dev/null && kill -KILL "$dockerd_pid"
    [[ -n "$rt_cgroup" ]] && echo 0 > "$rt_cgroup" 2>/dev/null
    # dockerd leaves its bind mount of the host's network namespace behind.
    for ns in /run/docker/netns/*; do [[ -e $ns ]] && umount "$ns" 2>/dev/null; done
  fi
  echo "$cc_before" > /proc/sys/net/ipv4/tcp_allowed_congestion_control
  end_step
  say "phases: $(IFS=';'; echo "${timings[*]}"); total $((SECONDS - t_start)) s"
  [[ -s "$work/line.json" ]] && cat "$work/line.json"  # the last line: the JSON
  rm -rf "$work"
  exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- 1. packages ---------------------------------------------------------------------
apt_updated=0
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  if ((!apt_updated)); then apt-get update -qq; apt_updated=1; fi
  say "installing $*"
  apt-get install -y -qq --no-install-recommends "$@" >"$work/apt.log" 2>&1 ||
    { tail -20 "$work/apt.log" >&2; exit 1; }
}
compose_works() { "$@" version >/dev/null 2>&1; }

step "packages"
need=()
command -v dockerd >/dev/null || need+=(docker.io)          # engine (and a client)
command -v docker >/dev/null || need+=(docker.io)
command -v python3 >/dev/null || need+=(python3)
python3 -c 'import yaml' 2>/dev/null || need+=(python3-yaml)
if ((${#need[@]})); then
  mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
  apt_install "${need[@]}"
fi
if [[ -n "${RSFC_COMPOSE:-}" ]]; then
  read -ra compose <<<"$RSFC_COMPOSE"
elif compose_works docker compose; then
  compose=(docker compose)
else
  compose_works docker-compose || apt_install docker-compose
  compose=(docker-compose)
fi
compose_works "${compose[@]}" || { say "compose does not work: ${compose[*]}"; exit 1; }
client=$(docker version --format '{{.Client.Version}}' 2>/dev/null || true)
say "client $client, compose: ${compose[*]} ($("${compose[@]}" version --short 2>/dev/null || true))"

# ---- 2. engine -----------------------------------------------------------------------
step "engine"
engine_answers() { docker info >/dev/null 2>&1; }
start_dockerd() {  # $@: extra flags; returns 0 once it answers
  dockerd "$@" >"$work/dockerd.log" 2>&1 </dev/null &
  dockerd_pid=$!
  for _ in $(seq 60); do
    engine_answers && return 0
    kill -0 "$dockerd_pid" 2>/dev/null || break
    sleep 0.5
  done
  kill -TERM "$dockerd_pid" 2>/dev/null; wait "$dockerd_pid" 2>/dev/null
  dockerd_pid=""
  return 1
}
if engine_answers; then
  say "using the engine that answers"
else
  own=(--iptables=false --ip-forward=false --bridge=none)
  rt=/sys/fs/cgroup/cpu/cpu.rt_runtime_us  # cgroup v1 with real-time group scheduling
  if [[ -e $rt ]] && start_dockerd "${own[@]}" --cpu-rt-runtime=400000; then
    rt_cgroup=/sys/fs/cgroup/cpu/docker/cpu.rt_runtime_us
  elif start_dockerd "${own[@]}" || start_dockerd; then
    :
  else
    tail -20 "$work/dockerd.log" >&2
    say "dockerd does not start (log above)"; exit 1
  fi
  started_dockerd=1
  say "started dockerd (pid $dockerd_pid)"
fi
say "engine $(docker version --format '{{.Server.Version}}')," \
  "storage $(docker info --format '{{.Driver}}')"
# Builds need the network for apt: the default bridge if there is one, else the host's.
build_net=()
docker network inspect bridge >/dev/null 2>&1 || build_net=(--network host)

# ---- 3. base image -------------------------------------------------------------------
mirror() {  # the Debian mirror apt uses for bookworm (one-line or deb822 sources)
  local f uri
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -r $f ]] || continue
    uri=$(awk '$1 == "deb" && $0 ~ / bookworm / {
      for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { print $i; exit } }' "$f")
    [[ -n $uri ]] && { echo "$uri"; return; }
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -r $f ]] || continue
    uri=$(awk 'BEGIN { RS = ""; FS = "\n" }
      /(^|\n)Suites:[^\n]*bookworm( |\n|$)/ && !/Suites:[^\n]*security/ {
        for (i = 1; i <= NF; i++) if ($i ~ /^URIs:/) { split($i, a, " "); print a[2]; exit } }' "$f")
    [[ -n $uri ]] && { echo "$uri"; return; }
  done
  echo http://deb.debian.org/debian
}
step "base image $BASE"
if docker image inspect "$BASE" >/dev/null 2>&1; then
  say "$BASE is there"
elif timeout 60 docker pull -q "$BASE" >/dev/null 2>&1; then
  say "pulled $BASE"
else
  command -v debootstrap >/dev/null || apt_install debootstrap
  m=$(mirror)
  say "no registry: debootstrap --variant=minbase bookworm from $m (about a minute)"
  debootstrap --variant=minbase bookworm "$work/rootfs" "$m" >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  # Like the official image: updates and security too; no caches.
  sec=${m%/debian}/debian-security
  [[ $m == */debian ]] || sec=http://deb.debian.org/debian-security
  rm -f "$work/rootfs/etc/apt/sources.list"
  cat >"$work/rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $m
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $sec
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  rm -rf "$work"/rootfs/var/cache/apt/archives/*.deb "$work"/rootfs/var/lib/apt/lists/*
  tar -C "$work/rootfs" -c . | docker import - "$BASE" >/dev/null
  rm -rf "$work/rootfs"
  size=$(docker image inspect -f '{{.Size}}' "$BASE" | awk '{printf "%d MB", $1 / 1e6}')
  say "made $BASE ($size)"
fi

# ---- 4. lab image --------------------------------------------------------------------
context() {  # the work tree without build trees or .git, as a tar stream
  if git -C "$REPO" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$REPO" && git ls-files -z --cached --others --exclude-standard |
      while IFS= read -r -d '' f; do [[ -e $f ]] && printf '%s\0' "$f"; done |
      tar --null -T - -c)
  else
    tar -C "$REPO" --exclude=./.git --exclude='./build*' --exclude='*/__pycache__' -c .
  fi
}
step "lab image $IMAGE"
say "building (Dockerfile steps below; apt and the compile take a few minutes the first time)"
set +e
context | docker build "${build_net[@]}" -t "$IMAGE" -f docker/Dockerfile - 2>&1 |
  tee "$work/build.log" | grep --line-buffered -E '^(Step [0-9]+/[0-9]+ :|#[0-9]+ \[)' |
  cut -c1-110 >&2
build_rc=${PIPESTATUS[1]}
set -e
if ((build_rc)); then tail -30 "$work/build.log" >&2; say "image build failed"; exit 1; fi

# ---- 5. scenario ---------------------------------------------------------------------
step "scenario (docker/lab.py${lab_args[*]:+ ${lab_args[*]}})"
RSFC_COMPOSE="${compose[*]}" python3 "$REPO/docker/lab.py" --image "$IMAGE" \
  --project "$PROJECT" --json-line-file "$work/line.json" "${lab_args[@]}" &
driver_pid=$!
set +e
wait "$driver_pid"
rc=$?
set -e
driver_pid=""
exit "$rc"
