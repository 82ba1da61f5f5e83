-- Prefect's own database beside the audit database (docker-compose.yml), with pg_trgm.
CREATE DATABASE prefect;
\connect prefect
CREATE EXTENSION IF NOT EXISTS pg_trgm;
