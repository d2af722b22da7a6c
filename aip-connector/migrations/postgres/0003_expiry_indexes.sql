-- Migration 3: the expiries `IdempotencyStore::purge_expired` deletes by.
--
-- Indexed so a purge reads only what it deletes. Only records are indexed: reservations are
-- never purged (each is replaced by the next claim of its key).

CREATE INDEX idempotency_entries_record_expiry ON idempotency_entries (expires_at_ms)
    WHERE kind = 'record';
CREATE INDEX retry_attempts_expiry ON retry_attempts (expires_at_ms);
