DROP FUNCTION sluice_rate_take_all(text[], text[], int[], bigint[], bigint[], bigint[], bigint, bigint);
DROP FUNCTION sluice_rate_sync(text, text, int, bigint, bigint, bigint, bigint, bigint);
DROP FUNCTION sluice_rate_settle(text, text, int, bigint, bigint, bigint, bigint, bigint, bigint);
DROP FUNCTION sluice_rate_take(text, text, int, bigint, bigint, bigint, bigint, bigint);
DROP FUNCTION sluice_rate_now();
DROP FUNCTION sluice_rate_sync_state(int, bigint, bigint, bigint, bigint, bigint);
DROP FUNCTION sluice_rate_settle_state(int, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint);
DROP FUNCTION sluice_rate_eval(int, bigint, bigint, bigint, bigint, bigint, bigint, bigint, bigint);
DROP FUNCTION sluice_rate_fresh_at(int, bigint, bigint, bigint, bigint);
