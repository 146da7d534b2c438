DROP TABLE sluice_rate_state;
