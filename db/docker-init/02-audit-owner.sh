#!/bin/sh
# The audit database, owned by a role that is not a superuser: the worker (its migrations and its
# audits) connects as that role, never as the image's superuser, so no source it is configured
# with can read what only a superuser may (role passwords, other databases, server files).
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
    -v owner="$BIASAUDIT_DB_USER" -v password="$BIASAUDIT_DB_PASSWORD" -v database="$BIASAUDIT_DB" <<'SQL'
CREATE ROLE :"owner" LOGIN PASSWORD :'password' NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
CREATE DATABASE :"database" OWNER :"owner";
SQL
