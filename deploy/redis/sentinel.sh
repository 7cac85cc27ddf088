#!/bin/sh
# A deckhand Sentinel: deploy/compose.yml's entrypoint, also run as a process by
# tests/integration/test_compose_redis.py (so what is tested is what ships).
#
# Sentinel keeps what it learns (the current primary, the replicas, the other sentinels,
# the epoch) by rewriting its own config file, so that file lives on a volume and is
# written only on the first boot: after a failover and a restart the sentinel still
# watches the promoted primary instead of the one the compose file named at the start.
# Hostnames are resolved and announced (not IP addresses), so a container that comes back
# with a new address is still the same member.
#
# Environment: ANNOUNCE_HOST (this sentinel's name), FIRST_PRIMARY (host:port), SERVICE
# (deckhand), QUORUM (2), SENTINEL_PORT (26379), REDIS_BIND ("* -::*"), DATA_DIR (/data),
# DOWN_AFTER_MS (5000), FAILOVER_TIMEOUT_MS (30000), REDIS_PASSWORD_FILE.
set -eu
: "${SENTINEL_PORT:=26379}" "${SERVICE:=deckhand}" "${DATA_DIR:=/data}" "${QUORUM:=2}"
: "${DOWN_AFTER_MS:=5000}" "${FAILOVER_TIMEOUT_MS:=30000}" "${REDIS_BIND:=* -::*}"
conf="$DATA_DIR/sentinel.conf"

if [ ! -s "$conf" ]; then  # first boot only: afterwards the file is Sentinel's own
  cat > "$conf" <<CONF
port $SENTINEL_PORT
bind $REDIS_BIND
protected-mode no
dir $DATA_DIR
sentinel resolve-hostnames yes
sentinel announce-hostnames yes
sentinel announce-ip $ANNOUNCE_HOST
sentinel announce-port $SENTINEL_PORT
sentinel monitor $SERVICE ${FIRST_PRIMARY%:*} ${FIRST_PRIMARY##*:} $QUORUM
sentinel down-after-milliseconds $SERVICE $DOWN_AFTER_MS
sentinel failover-timeout $SERVICE $FAILOVER_TIMEOUT_MS
sentinel parallel-syncs $SERVICE 1
CONF
fi
if [ -n "${REDIS_PASSWORD_FILE:-}" ]; then  # the current password, whatever the file said
  grep -v "^sentinel auth-pass $SERVICE " "$conf" > "$conf.new" || true
  echo "sentinel auth-pass $SERVICE $(cat "$REDIS_PASSWORD_FILE")" >> "$conf.new"
  cat "$conf.new" > "$conf" && rm -f "$conf.new"
fi
exec redis-server "$conf" --sentinel
