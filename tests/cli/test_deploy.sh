#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The deployment files in deploy/ against the ckptd they deploy:
#   1. every ckptd flag they use (the unit's ExecStart, the example config,
#      the Dockerfile's CMD, the manifest's args) is one `ckptd --help` lists,
#      and the three agree on the data directory, ports and user;
#   2. the image's runtime stage installs the Debian package of every shared
#      library ckptd and cprctl load directly, and no -dev package;
#   3. the systemd unit passes `systemd-analyze verify` without a warning and
#      `systemd-analyze security --offline` at exposure 2.0 or better, its
#      syscall filter includes io_uring_setup/enter/register, and ckptd run
#      under that very filter (seccomp, killed on any other call) writes,
#      verifies, collects, reloads on SIGHUP and stops cleanly on SIGTERM;
#   4. the Kubernetes manifest, parsed with PyYAML: probes on the gRPC port
#      (and none of the kubelet's plaintext gRPC probes on a TLS port), the
#      volume claim at the data directory, secrets at the TLS and auth paths,
#      ports and metrics annotations, a non-root read-only container with no
#      capabilities, resources, grace period, Parallel pod management.
# Parts whose tool is missing are reported and left out: PyYAML (4),
# libseccomp (the run in 3), dpkg (2); without systemd-analyze the test
# checks what it can and then exits 77 (skipped).
# Usage: test_deploy.sh SOURCE_DIR CKPTD CPRCTL CPRCTL_FIXTURE [sanitize]
set -euo pipefail

src=$1
ckptd=$2
cprctl=$3
fixture=$4
sanitize=${5:-}
unit=$src/deploy/systemd/ckptd.service
conf=$src/deploy/systemd/ckptd.conf
dockerfile=$src/deploy/docker/Dockerfile
manifest=$src/deploy/k8s/ckptd.yaml
work=$(mktemp -d "${TMPDIR:-/tmp}/deploy-test.XXXXXX")
py=/usr/bin/python3
notes=()

fail() { echo "test_deploy: $*" >&2; exit 1; }
note() { notes+=("$*"); }
source "$(dirname "$0")/lib_ckptd.sh"
trap 'kill_daemons; rm -rf "$work"' EXIT

for f in "$unit" "$conf" "$dockerfile" "$manifest"; do
    [[ -f $f ]] || fail "$f is missing"
done

# ---- 1. flags ----------------------------------------------------------------------

"$ckptd" --help > "$work/help" || fail "ckptd --help failed"
grep -oE -- '--[a-z][a-z-]*' "$work/help" | sort -u > "$work/known"

# check_flags WHERE MIN: the flags on stdin are all known, and at least MIN.
check_flags() {
    local where=$1 min=$2 flag n=0
    while read -r flag; do
        grep -qxF -- "$flag" "$work/known" ||
            fail "$where uses $flag, which 'ckptd --help' does not list"
        n=$((n + 1))
    done
    ((n >= min)) || fail "$where: found $n ckptd flags, expected at least $min (parsing broke?)"
}

# The unit's command lines; the config's keys, commented defaults included.
check_flags "$unit" 1 < <(grep -E '^ExecStart=' "$unit" | grep -oE -- '--[a-z][a-z-]*')
check_flags "$conf" 10 < <(sed -nE 's/^#? ?([a-z][a-z-]*) = .*/--\1/p' "$conf")
# The Dockerfile's ENTRYPOINT and CMD (with their continuation lines).
check_flags "$dockerfile" 4 < <(awk '/^(CMD|ENTRYPOINT) /{on=1} on{print; if ($0 !~ /\\$/) on=0}' \
    "$dockerfile" | grep -oE -- '"--[a-z][a-z-]*' | tr -d '"')
# The manifest's args: list items that are flags (comments are not list items).
check_flags "$manifest" 5 < <(sed -nE 's/^ +- (--[a-z][a-z-]*)(=.*)?$/\1/p' "$manifest")

# One layout everywhere: the store at /var/lib/ckptd, which is the unit's
# StateDirectory, the image's VOLUME and the manifest's --data-dir.
grep -qxE 'data-dir = /var/lib/ckptd' "$conf" || fail "$conf: data-dir is not /var/lib/ckptd"
grep -qxE 'StateDirectory=ckptd' "$unit" || fail "$unit: StateDirectory is not ckptd"
grep -qF 'VOLUME ["/var/lib/ckptd"]' "$dockerfile" || fail "$dockerfile: no VOLUME /var/lib/ckptd"
grep -qE -- '- --data-dir=/var/lib/ckptd$' "$manifest" || fail "$manifest: --data-dir is not /var/lib/ckptd"
grep -qE '"--data-dir", "/var/lib/ckptd"' "$dockerfile" || fail "$dockerfile: CMD's --data-dir"
grep -qxE 'EXPOSE 7717 9717' "$dockerfile" || fail "$dockerfile: EXPOSE 7717 9717"
grep -qxE 'USER 10001:10001' "$dockerfile" || fail "$dockerfile: USER is not 10001:10001"
grep -qE '^ENTRYPOINT \["/usr/local/bin/ckptd"\]' "$dockerfile" || fail "$dockerfile: ENTRYPOINT"
grep -qE '^ARG DEBIAN_IMAGE=debian:bookworm' "$dockerfile" || fail "$dockerfile: not Debian 12"

# ---- 2. the image's runtime packages ---------------------------------------------

# The words of the last stage's `apt-get install`, up to its `&&`.
awk '/^FROM /{buf=""; on=0} /apt-get install/{on=1} on{buf=buf " " $0; if ($0 !~ /\\$/) on=0}
     END{print buf}' "$dockerfile" | sed 's/.*apt-get install//; s/&&.*//' |
    tr ' \\' '\n\n' | grep -E '^[a-z0-9][a-z0-9.+-]+$' | sort -u > "$work/runtime-pkgs"
[[ -s $work/runtime-pkgs ]] || fail "$dockerfile: no apt-get install in the runtime stage"
if grep -E -e '-dev$' -e '^python' -e 'cmocka' -e 'torch' "$work/runtime-pkgs"; then
    fail "$dockerfile: the runtime stage installs build or test packages (above)"
fi
if [[ -n $sanitize ]]; then
    note "runtime libraries not compared (a sanitizer build loads more)"
elif command -v dpkg > /dev/null && command -v readelf > /dev/null; then
    readelf -d "$ckptd" "$cprctl" | sed -nE 's/.*Shared library: \[(.*)\]/\1/p' |
        sort -u > "$work/needed"
    [[ -s $work/needed ]] || fail "readelf found no shared libraries in ckptd and cprctl"
    # One dpkg query for all (each costs a walk of dpkg's file lists).
    mapfile -t patterns < <(sed 's|^|*/|' "$work/needed")
    dpkg -S "${patterns[@]}" > "$work/owners" 2> /dev/null || true
    while read -r lib; do
        pkgs=$(awk -v tail="/$lib" 'substr($0, length($0) - length(tail) + 1) == tail' \
               "$work/owners" | sed -E 's/[:,].*//' | sort -u)
        [[ -n $pkgs ]] || { note "$lib is not from a Debian package: not compared"; continue; }
        ok=0
        for p in $pkgs; do
            [[ $p =~ ^(libc6|libgcc-s1|libstdc\+\+6)$ ]] && ok=1 # in every Debian image
            grep -qxF "$p" "$work/runtime-pkgs" && ok=1
        done
        ((ok)) || fail "ckptd or cprctl loads $lib (package $pkgs), which $dockerfile's runtime stage does not install"
    done < "$work/needed"
else
    note "dpkg or readelf missing: runtime libraries not compared"
fi

# ---- 3. the systemd unit -----------------------------------------------------------

grep -qxF 'ExecStart=/usr/local/bin/ckptd --config /etc/ckptd/ckptd.conf' "$unit" ||
    fail "$unit: ExecStart is not ckptd --config /etc/ckptd/ckptd.conf"
grep -qxF 'ExecReload=/bin/kill -HUP $MAINPID' "$unit" || fail "$unit: ExecReload does not send SIGHUP"
grep -qxF 'RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX' "$unit" ||
    fail "$unit: RestrictAddressFamilies"
grep -qxF 'CapabilityBoundingSet=' "$unit" || fail "$unit: capabilities not dropped"

have_analyze=0
command -v systemd-analyze > /dev/null && have_analyze=1
if ((have_analyze)); then
    # verify wants ExecStart to exist: a copy that starts the built ckptd.
    mkdir "$work/unit"
    sed "s#^ExecStart=/usr/local/bin/ckptd #ExecStart=$ckptd #" "$unit" > "$work/unit/ckptd.service"
    out=$(systemd-analyze verify "$work/unit/ckptd.service" 2>&1) ||
        fail "systemd-analyze verify: $out"
    # Unknown or misspelled keys are only warnings: none may name the unit.
    if grep -F 'ckptd.service' <<< "$out"; then fail "systemd-analyze verify warns (above)"; fi
    systemd-analyze security --offline=yes --threshold=20 "$work/unit/ckptd.service" \
        > "$work/security" 2>&1 ||
        fail "systemd-analyze security: exposure above 2.0: $(tail -3 "$work/security")"

    # The filter as systemd resolves it: allowed groups less denied ones.
    systemd-analyze syscall-filter > "$work/groups" 2> /dev/null || fail "systemd-analyze syscall-filter failed"
    "$py" - "$unit" "$work/groups" > "$work/allowed" << 'PY' || fail "resolving the unit's SystemCallFilter failed"
import sys
groups, name = {}, None
for line in open(sys.argv[2]):  # "@group" flush left, then its items indented
    w = line.strip()
    if line.startswith("@"):
        name = w
        groups[name] = []
    elif w and not w.startswith("#") and name:
        groups[name].append(w)
def expand(item):
    if not item.startswith("@"):
        return {item}
    assert item in groups, "unknown group " + item
    return set().union(set(), *(expand(i) for i in groups[item] if i != item))
allow, deny = set(), set()
for line in open(sys.argv[1]):
    if line.startswith("SystemCallFilter="):
        value = line.split("=", 1)[1].strip()
        target = deny if value.startswith("~") else allow
        for item in value.lstrip("~").split():
            target |= expand(item)
assert allow, "no SystemCallFilter"
print("\n".join(sorted(allow - deny)))
PY
    for call in io_uring_setup io_uring_enter io_uring_register; do
        grep -qxF "$call" "$work/allowed" || fail "$unit's SystemCallFilter does not allow $call"
    done
else
    note "systemd-analyze missing: the unit is not verified"
fi

# ckptd under the unit's syscall filter, set with libseccomp: any call outside
# it kills the daemon (SIGSYS), so an exit 0 after SIGTERM proves it needs
# nothing else for a save (io_uring writes), a verify (io_uring reads), a gc,
# a reload and a stop. (systemd answers EPERM instead: ckptd would fail or
# fall back to plain I/O silently.)
seccomp_ok=0
if ((have_analyze)) && [[ -z $sanitize ]] &&
    "$py" -c 'import ctypes; ctypes.CDLL("libseccomp.so.2")' 2> /dev/null; then
    seccomp_ok=1
fi
if ((seccomp_ok)); then
    cat > "$work/filtered.py" << 'PY'
import ctypes, os, sys
lib = ctypes.CDLL("libseccomp.so.2")
lib.seccomp_init.restype = ctypes.c_void_p
lib.seccomp_init.argtypes = [ctypes.c_uint32]
lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
lib.seccomp_load.argtypes = [ctypes.c_void_p]
lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
SCMP_ACT_KILL_PROCESS, SCMP_ACT_ALLOW = 0x80000000, 0x7FFF0000
ctx = lib.seccomp_init(SCMP_ACT_KILL_PROCESS)
for name in open(sys.argv[1]).read().split():
    nr = lib.seccomp_syscall_resolve_name(name.encode())
    if nr >= 0:  # names this architecture lacks resolve to < 0
        assert lib.seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0) == 0, name
assert lib.seccomp_load(ctx) == 0, "seccomp_load failed"
os.execv(sys.argv[2], sys.argv[2:])
PY
    real_ckptd=$ckptd
    ckptd=$work/ckptd-filtered # start_daemon runs $ckptd
    printf '#!/bin/sh\nexec %q %q %q %q "$@"\n' "$py" "$work/filtered.py" "$work/allowed" \
        "$real_ckptd" > "$ckptd"
    chmod +x "$ckptd"
    start_daemon sc
    addr=${daemon_addr[sc]}
    "$fixture" write "grpc://$addr" > "$work/fixture.log" 2>&1 ||
        fail "under the unit's syscall filter, a save failed: $(tail -3 "$work/fixture.log"; tail -3 "$work/sc.log")"
    "$cprctl" --server "$addr" verify > "$work/verify.log" 2>&1 ||
        fail "under the unit's syscall filter, verify failed: $(tail -3 "$work/verify.log")"
    grep -q 'result: intact' "$work/verify.log" || fail "verify: $(cat "$work/verify.log")"
    "$cprctl" --server "$addr" gc --keep 1 > /dev/null 2>&1 || fail "under the unit's syscall filter, gc failed"
    kill -HUP "${daemon_pid[sc]}"
    deadline=$((SECONDS + 30))
    until grep -q 'SIGHUP' "$work/sc.log"; do
        ((SECONDS < deadline)) || fail "ckptd did not log the SIGHUP: $(tail -3 "$work/sc.log")"
        sleep 0.05
    done
    stop_daemon sc
    ckptd=$real_ckptd
else
    note "libseccomp, systemd-analyze or an uninstrumented ckptd missing: not run under the unit's syscall filter"
fi

# ---- 4. the Kubernetes manifest ----------------------------------------------------

if "$py" -c 'import yaml' 2> /dev/null; then
    "$py" - "$manifest" << 'PY' || fail "$manifest: the checks above failed"
import sys, yaml

docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
kinds = {d["kind"]: d for d in docs}
assert set(kinds) == {"Service", "StatefulSet"}, sorted(kinds)
svc, sts = kinds["Service"], kinds["StatefulSet"]
spec, pod = sts["spec"], sts["spec"]["template"]["spec"]
labels = sts["spec"]["template"]["metadata"]["labels"]

assert svc["spec"]["clusterIP"] == "None", "the Service is not headless"
assert spec["serviceName"] == svc["metadata"]["name"], "serviceName is not the headless Service"
assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items()), "Service selector"
assert all(labels.get(k) == v for k, v in spec["selector"]["matchLabels"].items()), "selector"
assert spec["podManagementPolicy"] == "Parallel"
assert pod["terminationGracePeriodSeconds"] >= 30

(c,) = pod["containers"]
args = dict(a[2:].split("=", 1) for a in c["args"])
ports = {p["name"]: p["containerPort"] for p in c["ports"]}
assert ports == {"grpc": 7717, "metrics": 9717}, ports
assert args["listen"].endswith(":7717") and args["metrics-listen"].endswith(":9717"), args
assert {p["port"] for p in svc["spec"]["ports"]} == {7717, 9717}
ann = sts["spec"]["template"]["metadata"]["annotations"]
assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/port"] == "9717", ann
assert ann["prometheus.io/path"] == "/metrics"

# Probes: liveness on the gRPC port; readiness by GET /healthz on the
# metrics port (ckptd's health: 503 while the store cannot commit). The
# kubelet's gRPC probe speaks plaintext only: on a TLS port it would fail
# every time.
tls = "tls-cert" in args
for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
    probe = c.get(kind)
    assert probe is not None, "no " + kind
    if kind == "readinessProbe":
        get = probe.get("httpGet")
        assert get and get["path"] == "/healthz", "readiness is not GET /healthz"
        assert ports.get(get["port"], get["port"]) == 9717, "readiness is not on 9717"
        continue
    action = probe.get("grpc") or probe.get("tcpSocket")
    assert action, kind + ": neither grpc nor tcpSocket"
    assert ports.get(action["port"], action["port"]) == 7717, kind + " is not on 7717"
    assert not ("grpc" in probe and tls), kind + ": a gRPC probe on a TLS port"

# Volumes: the claim at --data-dir, secrets at the TLS and auth files.
mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
claims = {t["metadata"]["name"] for t in spec["volumeClaimTemplates"]}
assert mounts[args["data-dir"]] in claims, "--data-dir is not on a volume claim"
secrets = {v["name"] for v in pod["volumes"] if "secret" in v}
for flag in ("tls-cert", "tls-key", "tls-client-ca", "auth-file"):
    assert flag in args, "--" + flag + " is not given"
    directory = args[flag].rsplit("/", 1)[0]
    assert mounts.get(directory) in secrets, "--" + flag + " is not in a mounted Secret"

# Privileges: non-root, read-only root, nothing to escalate to.
psc, csc = pod["securityContext"], c["securityContext"]
assert psc["runAsNonRoot"] is True and psc["runAsUser"] == 10001 and psc["fsGroup"] == 10001
assert csc["readOnlyRootFilesystem"] is True and csc["allowPrivilegeEscalation"] is False
assert csc["capabilities"]["drop"] == ["ALL"] and "add" not in csc["capabilities"]
assert psc["seccompProfile"]["type"] == "RuntimeDefault"
res = c["resources"]
assert res["requests"]["cpu"] and res["requests"]["memory"] and res["limits"]["memory"]
PY
else
    note "PyYAML (python3-yaml) missing: the manifest's structure is not checked"
fi

for n in "${notes[@]}"; do echo "test_deploy: note: $n"; done
((have_analyze)) || { echo "test_deploy: skipped (no systemd-analyze) after the other checks passed"; exit 77; }
echo "test_deploy: ok"
