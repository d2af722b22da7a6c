-- Migration 7: the token of an approval's resume claim (`ResumeClaim::token`), by which
-- `release_resume` gives back that claim only; before, claims were told apart by their time,
-- and two in the same millisecond were not. Rows resumed before it keep NULL: no host of this
-- build holds their claims.

ALTER TABLE approval_records ADD COLUMN resume_token TEXT;
