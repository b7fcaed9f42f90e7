#!/usr/bin/env bash
# lint.sh: the shell tests' own mistakes that make a check unable to fail. A check's status must
# not be read as `$?` after a command substitution in its message: bash runs the $(...) first,
# and $? is then the substitution's status, not the condition's (check "... $(basename "$f")" $?
# passes whatever came before). Such a line takes the status first (ok=$?, then check ... $ok).
# The lint is tested on a line of each kind. One ok/FAIL line per case.
cd "$(dirname "$0")/.."
. tests/common.sh

# FILE...: each check command (its continuation lines joined) whose status argument is a bare $?
# after a $( in the message; prints FILE:LINE: TEXT
scan() {
    python3 - "$@" <<'PY'
import re, sys
for f in sys.argv[1:]:
    lines = open(f, encoding="utf-8", errors="replace").read().split("\n")
    i = 0
    while i < len(lines):
        start, cmd = i, lines[i]
        if re.match(r"\s*check\s", cmd):
            while cmd.endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd = cmd[:-1] + lines[i]
            # outside any $(...): a substitution seen, then a bare $? argument
            depth, seen, k = 0, False, 0
            while k < len(cmd):
                if cmd.startswith("$((", k):
                    depth, k = depth + 2, k + 3
                    continue
                if cmd.startswith("$(", k):
                    seen = seen or depth == 0
                    depth, k = depth + 1, k + 2
                    continue
                c = cmd[k]
                depth += (c == "(") - (c == ")") if depth > 0 or c == "(" else 0
                if depth == 0 and seen and re.match(r"\s\$\?(\s|$)", cmd[k:]):
                    print(f"{f}:{start + 1}: {cmd.strip()[:160]}")
                    break
                k += 1
        i += 1
PY
}

found=$(scan $(ls tests/*.sh | grep -v "^tests/lint.sh$")) || found="the scan itself failed: $found"
[ -z "$found" ]
check "no check reads \$? after a command substitution in its message (tests/*.sh but this one)" $? "$found"

cat > "$tmp/t.sh" <<'T'
check "resumed from $(basename "$f")" $?
check "a count $((1 + 1))" $?
ok=$?
check "resumed from $(basename "$f")" $ok
check "two lines $(date)" \
    $? "detail"
check "status inside" $([ -n "$x" ]; echo $?)
T
got=$(scan "$tmp/t.sh" 2>&1 | cut -d: -f2 | tr '\n' ' ')
[ "$got" = "1 5 " ]
check "the lint flags a substitution before \$? (lines 1 and 5 of 6), not arithmetic, ok=\$? or a status computed inside" $? "flagged lines: $got"

[ $failed -eq 0 ]
