# Sourced by the guest script of tests/kernel/test_service.py, after the README's install steps,
# in a guest running systemd with poold.service enabled; cwd is the checkout. It drives the
# service as an operator and a client would and leaves what it saw under $OUT for the test to
# judge: it asserts nothing itself. From the test: $TTL (nobody's lease), $WATCHDOG (the
# drop-in's WatchdogSec), $TOKEN_OUT (the output file of the README's `poold token create`).

trap 'journalctl -u poold --no-pager -o short-monotonic > "$OUT/journal-poold.txt" 2>&1' EXIT
systemctl is-active -q poold || exit 1  # the README's steps failed: nothing more to see here

svc() {
  systemctl show poold -p ActiveState -p SubState -p StatusText -p MainPID -p NRestarts \
      -p Result -p WatchdogUSec > "$OUT/show-$1.txt"
}
ready() {
  curl -s -o "$OUT/readyz-$1.json" -w '%{http_code}' http://127.0.0.1:7077/readyz \
      > "$OUT/readyz-$1.code"
}
until_true() {  # SECONDS COMMAND...: a bounded wait
  end=$(( $(date +%s) + $1 )); shift
  until "$@"; do [ "$(date +%s)" -lt "$end" ] || return 1; sleep 0.2; done
}
now() { date +%s.%N > "$OUT/$1.t"; }
op() {  # NAME METHOD PATH JSON: as root (an admin by SO_PEERCRED, no token); then daxctl's view
  curl -s --unix-socket /run/poold/api.sock -X "$2" -H 'content-type: application/json' \
      -d "$4" -o "$OUT/op-$1.json" -w '%{http_code}' "http://poold$3" > "$OUT/op-$1.code"
  daxctl list -D > "$OUT/op-$1.daxctl"
}
renewed_since() {  # MARK: nobody's lease was renewed after the time in $OUT/MARK.t
  awk -v since="$(cat "$OUT/$1.t")" -F'[:,]' '/"renewed"/ && $2 + 0 > since + 0 { n++ }
      END { exit !n }' "$OUT/hold.jsonl"
}

# The device operations below carve the hmem region by hand: list it in manual_regions in the
# config, else poold carves it per lease (the default, tests/kernel/test_device_ops.py). The
# daemon the README started emptied dax0.0 doing that.
sed -i 's/^#manual_regions = .*/manual_regions = ["dax0"]/' /etc/poold/poold.toml
grep -q '^manual_regions = \["dax0"\]' /etc/poold/poold.toml || exit 1
systemctl restart poold
until_true 120 systemctl is-active -q poold

svc started; ready started
stat -c '%a %U %n' /var/lib/poold /var/lib/poold/admin.token /run/poold /run/poold/api.sock \
    /run/poold/fd.sock > "$OUT/stat.txt" 2>&1

# Device operations that write sysfs, under the unit's sandbox.
op resize POST /v1/devices/dax0.0/resize '{"size": 0}'
op create-1 POST /v1/devices '{"region": 0, "size": 268435456}'
op create-2 POST /v1/devices '{"region": 0, "size": 268435456}'
op to-ram POST /v1/devices/dax0.1/reconfigure '{"mode": "system-ram"}'

# nobody, with the tenant token, runs a copy of the client it can read (the checkout copy is in
# root's 0700 temporary directory): a lease on each new device, then one held on emu0.
client=/usr/local/lib/poold-test/service_client.py
install -D -m 0644 tests/kernel/service_client.py "$client"
install -d -m 0755 /run/poold-test
token=$(sed -n 's/.*"bearer": "\([^"]*\)".*/\1/p' "$OUT/$TOKEN_OUT")
setpriv --reuid=nobody --regid=nogroup --clear-groups \
    env -C / HOME=/ POOLD_TOKEN="$token" /opt/poold/bin/python "$client" \
    emu0 "$TTL" /run/poold-test/stop dax0.1:numa-node-lease dax0.2:devdax-lease \
    > "$OUT/hold.jsonl" 2> "$OUT/hold.err" &
holder=$!
mapped() { grep -q '"mapped"' "$OUT/hold.jsonl" || ! kill -0 "$holder" 2>/dev/null; }
until_true 240 mapped
op to-devdax POST /v1/devices/dax0.1/reconfigure '{"mode": "devdax"}'

# A drop-in (the README's way to change a setting), taken by the restart.
mkdir -p /etc/systemd/system/poold.service.d
printf '[Service]\nWatchdogSec=%ss\n' "$WATCHDOG" \
    > /etc/systemd/system/poold.service.d/watchdog.conf
systemctl daemon-reload
svc before-restart; now restart-begin
systemctl restart poold; echo $? > "$OUT/restart.rc"
now restart-end; svc restarted; ready restarted
# The new daemon renews nobody's lease (within a renewal period) before the next test stops it.
until_true $((TTL / 3 + 15)) renewed_since restart-end
now stop-begin

# The watchdog: a daemon that stops answering is killed and started again.
old=$(systemctl show -p MainPID --value poold)
back() {
  [ "$(systemctl show -p MainPID --value poold)" != "$old" ] &&
  [ "$(systemctl show -p ActiveState --value poold)" = active ]
}
kill -STOP "$old"
until_true 180 back; echo $? > "$OUT/watchdog.rc"
now watchdog-end; svc watchdog; ready watchdog

# nobody's lease: a renewal by this daemon too, then its bytes, then its release.
cp "$OUT/watchdog-end.t" /run/poold-test/stop.new  # whole: never read half written
mv /run/poold-test/stop.new /run/poold-test/stop
wait "$holder"; echo $? > "$OUT/hold.rc"
