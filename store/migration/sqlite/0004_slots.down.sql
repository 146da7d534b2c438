DROP TABLE sluice_slots;
DROP INDEX sluice_slot_windows_open;
DROP TABLE sluice_slot_windows;
DROP TABLE sluice_slot_configs;
