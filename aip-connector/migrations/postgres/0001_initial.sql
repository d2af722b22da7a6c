-- Migration 1: idempotency entries, approval records and transaction records.
--
-- Applied once per schema by `PostgresStore::connect`, inside a transaction that holds an
-- advisory lock and records it in `schema_migrations`. Bodies are the records as JSON (`json`,
-- not `jsonb`: replayed results must keep their key order); the other columns are the ones the
-- compare-and-set statements test, and they are authoritative over the same fields in a body.
-- Ids are `COLLATE "C"`: compared and sorted bytewise, as the other backends do.

CREATE TABLE idempotency_entries (
    key            TEXT COLLATE "C" PRIMARY KEY,
    kind           TEXT NOT NULL CHECK (kind IN ('reservation', 'record')),
    -- Fencing token of the live reservation; set exactly when the entry is a reservation.
    reservation_id TEXT COLLATE "C" CHECK ((kind = 'reservation') = (reservation_id IS NOT NULL)),
    -- A reservation always expires; a record may be kept forever (NULL).
    expires_at_ms  BIGINT CHECK (kind = 'record' OR expires_at_ms IS NOT NULL),
    body           JSON NOT NULL
);

CREATE TABLE approval_records (
    approval_id TEXT COLLATE "C" PRIMARY KEY,
    status      TEXT NOT NULL
                CHECK (status IN ('pending', 'approved', 'denied', 'expired', 'revoked')),
    resumed     BOOLEAN NOT NULL,
    version     BIGINT NOT NULL CHECK (version >= 0),
    body        JSON NOT NULL
);

CREATE TABLE transactions (
    transaction_id TEXT COLLATE "C" PRIMARY KEY,
    -- The owning action; moves when a plan is claimed by its commit action.
    action_id      TEXT COLLATE "C" NOT NULL,
    -- At most one record answers to a plan id (NULLs do not collide).
    plan_id        TEXT COLLATE "C" UNIQUE,
    status         TEXT NOT NULL,
    revision       BIGINT NOT NULL CHECK (revision >= 0),
    -- `TransactionRecord::is_recoverable`, computed by the writer: the recovery scan's filter.
    recoverable    BOOLEAN NOT NULL,
    body           JSON NOT NULL
);

CREATE INDEX transactions_action_id ON transactions (action_id);
CREATE INDEX transactions_recoverable ON transactions (transaction_id) WHERE recoverable;
