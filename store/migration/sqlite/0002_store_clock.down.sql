DROP TABLE sluice_clock;
