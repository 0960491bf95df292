#!/usr/bin/env bash
# Installs the Debian packages the tests need that are missing, in one
# apt-get (two at once would wait on dpkg's lock, or fail on it). Each
# argument is COMMAND:PACKAGE[:required]: PACKAGE is installed when COMMAND
# is not on the PATH. A required one still missing afterwards fails; the
# others only say which tests will be skipped.
set -uo pipefail
missing=()
for spec in "$@"; do
  IFS=: read -r command package _ <<< "$spec"
  command -v "$command" > /dev/null || missing+=("$package")
done
[ ${#missing[@]} = 0 ] && exit 0
echo "installing Debian packages: ${missing[*]}"
if ! (apt-get update -qq && apt-get install -y -qq "${missing[@]}") > /dev/null 2>&1; then
  # One unavailable package fails the whole install: then each on its own.
  for package in "${missing[@]}"; do apt-get install -y -qq "$package" > /dev/null 2>&1; done
fi
status=0
for spec in "$@"; do
  IFS=: read -r command package required <<< "$spec"
  command -v "$command" > /dev/null && continue
  if [ -n "$required" ]; then
    echo "$package could not be installed, and $command is required" >&2
    status=1
  else
    echo "$package could not be installed; the tests that need $command will be skipped"
  fi
done
exit $status
