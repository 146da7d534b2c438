-- Reserved (see 0008_reserved.up.sql).
SELECT 1;
