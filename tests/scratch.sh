#!/usr/bin/env bash
# The scratch folder of a ctest run: every test's TMPDIR (CMakeLists.txt).
# Each test removes what it makes there at its end; what is left once all
# have run (a killed run's file, a folder a guard missed) is named, removed,
# and fails the run, so that `make test` leaves nothing behind.
#
#   tests/scratch.sh setup DIR    make DIR, empty
#   tests/scratch.sh check DIR    fail, naming them, if DIR holds anything; remove DIR
set -euo pipefail
what=$1
dir=$2
case $what in
    setup)
        rm -rf "$dir"
        mkdir -p "$dir"
        ;;
    check)
        left=$(find "$dir" -mindepth 1 -maxdepth 3 2>/dev/null | sed "s|^$dir/||" | head -50)
        rm -rf "$dir"
        if [ -n "$left" ]; then
            echo "scratch: the tests left in their TMPDIR:" >&2
            echo "$left" >&2
            exit 1
        fi
        echo "scratch: nothing left behind"
        ;;
    *)
        echo "usage: $0 setup|check DIR" >&2
        exit 2
        ;;
esac
