#!/usr/bin/env bash
# Checks the alerting rules: `promtool check rules` on the rules file,
# `promtool test rules` on the unit tests in test/alerts/, and that every
# alert has a runbook section in docs/operations.md and at least one test.
#
# promtool is built from the version pinned in hack/tools/prometheus/go.mod
# into bin/tools/promtool. As in hack/build-controlplane.sh, a stamp file
# records the hash of go.mod, go.sum and the build flags, so the build (about
# 6 minutes on 2 cores with a cold build cache) runs only when the pin changes.
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${TOOLS_BIN_DIR:-"${root}/bin/tools"}
module="${root}/hack/tools/prometheus"
rules="${root}/charts/gamesession-controller/files/prometheus-rules.yaml"
runbooks="${root}/docs/operations.md"
runbook_base=https://github.com/example/gamesession-controller/blob/main/docs/operations.md
tests=("${root}"/test/alerts/*.test.yaml)
promtool="${out}/promtool"

fail() {
  echo "verify-alerts: FAILED: $*" >&2
  exit 1
}

# promtool needs none of Prometheus' service discovery plugins (the cloud
# SDKs are more than half of its build); remove_all_sd leaves them out.
version=$(cd "${module}" && go list -m -f '{{.Version}}' github.com/prometheus/prometheus)
build_flags=(-trimpath -tags remove_all_sd -ldflags "-X github.com/prometheus/common/version.Version=${version}")

build_promtool() {
  mkdir -p "${out}"
  local stamp="${out}/.stamp-prometheus" want
  want=$(cat "${module}/go.mod" "${module}/go.sum" <(echo "${build_flags[*]}") | sha256sum | cut -d' ' -f1)
  if [[ -x ${promtool} && -f ${stamp} && $(cat "${stamp}") == "${want}" ]]; then
    return
  fi
  echo "verify-alerts: building promtool from hack/tools/prometheus..."
  local start=${SECONDS}
  # The module's other tool, the Prometheus server of
  # hack/dashboard-picture.sh, is not needed here: build promtool alone.
  (cd "${module}" && go build "${build_flags[@]}" -o "${out}/" github.com/prometheus/prometheus/cmd/promtool)
  echo "${want}" > "${stamp}"
  echo "verify-alerts: built promtool in $((SECONDS - start))s"
}

[[ -f ${rules} ]] || fail "no rules file ${rules#"${root}/"}"
[[ -f ${runbooks} ]] || fail "no runbooks: ${runbooks#"${root}/"} is missing"
[[ -f ${tests[0]} ]] || fail "no tests in test/alerts/"

build_promtool
"${promtool}" --version 2>&1 | head -n 1

echo "verify-alerts: promtool check rules"
"${promtool}" check rules "${rules}" || fail "promtool check rules ${rules#"${root}/"}"

echo "verify-alerts: promtool test rules (${#tests[@]} files)"
# Relative rule_files in the tests resolve against each test file's directory.
"${promtool}" test rules "${tests[@]}" || fail "promtool test rules test/alerts/"

# Every alert links to its runbook (a heading of docs/operations.md, whose
# GitHub anchor is the heading lowercased with spaces as hyphens) and has a
# test in test/alerts/.
alerts=$(sed -n 's/^ *- alert: *\([A-Za-z0-9_]*\) *$/\1/p' "${rules}")
[[ -n ${alerts} ]] || fail "no alerts found in ${rules#"${root}/"}"
anchors=$(sed -n 's/^#\{1,6\} \(.*\)$/\1/p' "${runbooks}" |
  tr '[:upper:]' '[:lower:]' | sed 's/[^a-z0-9 _-]//g; s/ /-/g')
problems=0
# Each runbook_url must point at its own alert's section.
while read -r alert url; do
  echo "verify-alerts: ${alert}: runbook_url ${url} is not ${runbook_base}#$(tr '[:upper:]' '[:lower:]' <<<"${alert}")" >&2
  problems=$((problems + 1))
done < <(awk -v base="${runbook_base}" '
  /^ *- alert:/ { alert = $3 }
  /^ *runbook_url:/ { if ($2 != base "#" tolower(alert)) print alert, $2 }' "${rules}")
for alert in ${alerts}; do
  anchor=$(tr '[:upper:]' '[:lower:]' <<<"${alert}")
  if ! grep -qx "${anchor}" <<<"${anchors}"; then
    echo "verify-alerts: ${alert}: docs/operations.md has no heading \"${alert}\" (anchor #${anchor})" >&2
    problems=$((problems + 1))
  fi
  if ! grep -q "alertname: ${alert}$" "${tests[@]}"; then
    echo "verify-alerts: ${alert}: no test in test/alerts/" >&2
    problems=$((problems + 1))
  fi
done
if [[ $(grep -c 'runbook_url:' "${rules}") != $(wc -w <<<"${alerts}") ]]; then
  echo "verify-alerts: every alert needs exactly one runbook_url" >&2
  problems=$((problems + 1))
fi
((problems == 0)) || fail "${problems} problem(s) with runbooks or tests"
echo "verify-alerts: OK: $(wc -w <<<"${alerts}") alerts, each with a runbook and tests"
