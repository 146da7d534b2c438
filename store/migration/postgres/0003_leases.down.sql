DROP FUNCTION sluice_lease_fenced_write(text, text, bigint, text, bytea, bigint);
DROP FUNCTION sluice_lease_fence(text, text, bigint);
DROP FUNCTION sluice_lease_release(text, text, text, bigint, bigint);
DROP FUNCTION sluice_lease_renew(text, text, text, bigint, bigint, bigint);
DROP FUNCTION sluice_lease_acquire(text, text, text, bigint, bigint, bigint);
DROP TABLE sluice_lease_fence;
DROP SEQUENCE sluice_lease_token;
DROP TABLE sluice_lease_holder;
