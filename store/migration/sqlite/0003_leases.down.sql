DROP TABLE sluice_lease_fence;
DROP TABLE sluice_lease_seq;
DROP TABLE sluice_lease_holder;
