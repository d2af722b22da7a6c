-- Migration 4: what retention deletes by (`ApprovalStore::purge_closed_approvals`,
-- `TransactionStore::purge_finished_transactions`), filled in from the bodies of the rows
-- already there.
--
-- `finished_at_ms` is a transaction's `updated_at_ms` once it is finished
-- (`TransactionRecord::is_finished`, whose statuses the `IN` list spells), else NULL. Writers
-- set all three columns from the record on every write.

ALTER TABLE approval_records ADD COLUMN created_at_ms BIGINT;
ALTER TABLE approval_records ADD COLUMN expires_at_ms BIGINT;
UPDATE approval_records SET
    created_at_ms = (body->>'created_at_ms')::bigint,
    expires_at_ms = (body->>'expires_at_ms')::bigint;
CREATE INDEX approval_records_created ON approval_records (created_at_ms);

ALTER TABLE transactions ADD COLUMN finished_at_ms BIGINT;
UPDATE transactions SET finished_at_ms = (body->>'updated_at_ms')::bigint
    WHERE status IN ('dry_run_completed', 'committed', 'compensated', 'cancelled',
                     'rollback_not_supported', 'failed', 'reconciled');
CREATE INDEX transactions_finished ON transactions (finished_at_ms)
    WHERE finished_at_ms IS NOT NULL;
