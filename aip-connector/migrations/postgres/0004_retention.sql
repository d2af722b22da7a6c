-- Migration 4: what retention deletes by (`ApprovalStore::purge_closed_approvals`,
-- `TransactionStore::purge_finished_transactions`), filled in from the bodies of the rows
-- already there.
--
-- `finished_at_ms` is a transaction's `updated_at_ms` once it is finished
-- (`TransactionRecord::is_finished`, whose statuses the `IN` list spells), else NULL. Writers
-- set all three columns from the record on every write.

--
-- A body is read through `aip_store_millis`, not `body->>…` directly: `->>` on a `json` value
-- de-escapes every string in it and refuses a body holding `\u0000` (an action input may),
-- and a time beyond BIGINT (an approval that never expires is `u64::MAX`) would overflow the
-- cast. The helper reads the number from the body with `\u0000` escapes neutralised and
-- saturates it at BIGINT's maximum, as writers do; it is dropped at the end.

CREATE FUNCTION pg_temp.aip_store_millis(body json, field text) RETURNS bigint
    LANGUAGE sql IMMUTABLE AS $$
        SELECT LEAST(
            (replace(body::text, E'\\u0000', E'\\ufffd')::json ->> field)::numeric,
            9223372036854775807
        )::bigint
    $$;

ALTER TABLE approval_records ADD COLUMN created_at_ms BIGINT;
ALTER TABLE approval_records ADD COLUMN expires_at_ms BIGINT;
UPDATE approval_records SET
    created_at_ms = pg_temp.aip_store_millis(body, 'created_at_ms'),
    expires_at_ms = pg_temp.aip_store_millis(body, 'expires_at_ms');
CREATE INDEX approval_records_created ON approval_records (created_at_ms);

ALTER TABLE transactions ADD COLUMN finished_at_ms BIGINT;
UPDATE transactions SET finished_at_ms = pg_temp.aip_store_millis(body, 'updated_at_ms')
    WHERE status IN ('dry_run_completed', 'committed', 'compensated', 'cancelled',
                     'rollback_not_supported', 'failed', 'reconciled');

DROP FUNCTION pg_temp.aip_store_millis(json, text);
CREATE INDEX transactions_finished ON transactions (finished_at_ms)
    WHERE finished_at_ms IS NOT NULL;
