# common.sh: what the shell tests that print one ok/FAIL line per case share. Sourced from a
# test (which has already cd'ed to the repository root): sets $tmp (removed at exit), $failed,
# $mpi (1 when mpirun and an MPI build of ./train are here), and defines check, same_inspect and sha.
set -u
tmp=$(mktemp -d "/tmp/dpt_$(basename "$0" .sh).XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failed=0
mpi=0
command -v mpirun >/dev/null && ! ./train --env 2>/dev/null | grep -q 'not in this build' && mpi=1

check() { # NAME RC DETAIL: "ok NAME" when RC is 0, else "FAIL NAME: DETAIL" (counted)
    if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1: $3"; failed=$((failed + 1)); fi
}

same_inspect() { # CKPT_A CKPT_B: --inspect says the same of both but its first line (the file's
    # name, which the config in a checkpoint names too): the meta, every tensor, the optimizer
    # state's and the weights' hashes; and A is a checkpoint holding both (two unreadable files
    # would say the same)
    local a b
    a=$(./train --inspect "$1" 2>&1 | sed 1d)
    b=$(./train --inspect "$2" 2>&1 | sed 1d)
    [ "$a" = "$b" ] && grep -q "^weights sha256" <<<"$a" && grep -q "^optimizer sha256" <<<"$a"
}

sha() { # the last "weights sha256" a run printed (stdin)
    grep -o 'weights sha256 [0-9a-f]\{64\}' | tail -1 | grep -o '[0-9a-f]\{64\}'
}
