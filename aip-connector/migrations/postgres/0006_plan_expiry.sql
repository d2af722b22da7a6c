-- Migration 6: a plan nobody committed ends, for retention, when it expires
-- (`TransactionRecord::finished_at_ms`: 15 minutes after it was made), so that
-- `TransactionStore::purge_finished_transactions` deletes it once the retention period has
-- passed; before this, every preview nobody committed kept its input for good. Writers set the
-- column from the record on every write; this fills it in for the plans already there.
--
-- The body is read through a helper, as migration 4 reads it (see there: `->>` on a `json`
-- value refuses a body holding `\u0000`, which an action input may).

CREATE FUNCTION pg_temp.aip_store_millis(body json, field text) RETURNS bigint
    LANGUAGE sql IMMUTABLE AS $$
        SELECT LEAST(
            (replace(body::text, E'\\u0000', E'\\ufffd')::json ->> field)::numeric,
            9223372036854775807
        )::bigint
    $$;

UPDATE transactions
    SET finished_at_ms = LEAST(
        pg_temp.aip_store_millis(body, 'created_at_ms')::numeric + 900000,
        9223372036854775807
    )::bigint
    WHERE status = 'planned';

DROP FUNCTION pg_temp.aip_store_millis(json, text);
