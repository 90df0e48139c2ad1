#!/bin/sh
# Creates the Stockade roles and databases when the data volume is new. The postgres
# image's entrypoint runs this once, as the postgres user, against a server listening only
# on its unix socket. The passwords come from Secret stockade-postgres (environment), are
# handed to psql as variables and quoted by psql itself (:'name'), never pasted into SQL.
psql --no-psqlrc --set ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
  --set decision_password="$STOCKADE_DECISION_DB_PASSWORD" \
  --set audit_password="$STOCKADE_AUDIT_DB_PASSWORD" \
  --set executor_password="$STOCKADE_EXECUTOR_DB_PASSWORD" \
  --set executor_admin_password="$STOCKADE_EXECUTOR_ADMIN_DB_PASSWORD" \
  --file /etc/stockade/postgres/roles.sql
