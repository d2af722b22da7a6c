-- Migration 5: when an approval's single resume claimed it, so that retention keeps a resumed
-- approval for its period after the resume (`ApprovalRecord::is_purgeable`). Rows resumed
-- before it keep NULL, read as their creation time.

ALTER TABLE approval_records ADD COLUMN resumed_at_ms BIGINT;
