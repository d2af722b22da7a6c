-- Migration 2: retryable failures counted per idempotency key, for dead-lettering.
--
-- A row counts the retryable failures of one scoped key since it was first counted; it expires
-- with the key's records (NULL: never). `IdempotencyStore::count_attempt` increments it
-- atomically and restarts an expired count at 1.

CREATE TABLE retry_attempts (
    key           TEXT COLLATE "C" PRIMARY KEY,
    attempts      BIGINT NOT NULL CHECK (attempts >= 1),
    expires_at_ms BIGINT
);
