#!/bin/sh
# Sourced by the other lab/node scripts:  . "$(dirname "$0")/sysctl.sh"
#
# sysctl_set KEY VALUE   sets KEY to VALUE, writing only when it differs.
# Why "only when it differs": in a container /proc/sys is read-only (Docker mounts it so
# unless told otherwise, and Debian 12's docker-compose cannot tell it otherwise), so the
# docker lab gives each container these values at creation (docker/docker-compose.yml
# `sysctls:`) and the scripts then find nothing to write. A key that still differs and
# cannot be written is an error that names it.

sysctl_set() {
  _cur=$(sysctl -n "$1") || return 1
  [ "$_cur" = "$2" ] && return 0
  _err=$(sysctl -qw "$1=$2" 2>&1) && return 0
  echo "$(basename "$0"): cannot set $1=$2 (it is $_cur): $_err" >&2
  [ -w "/proc/sys/$(echo "$1" | tr . /)" ] ||
    echo "$(basename "$0"): /proc/sys is read-only here (a container?): give it $1=$2" \
      "at creation (docker run --sysctl, compose sysctls:)" >&2
  return 1
}
