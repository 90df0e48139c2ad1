-- One role and one database per Stockade service, run once by the postgres superuser
-- when the data volume is new (init-stockade.sh passes the passwords as psql variables,
-- so they never appear in this file or in a process list).
--
-- The decision and audit roles own their databases (their services create their tables
-- at start). The executor, the most exposed component, owns nothing (STORE-3): its
-- database belongs to stockade_executor_admin, which only the one-off migration Job logs
-- in as (`stockade executor-state migrate`), and the executor's role may only connect
-- and call the functions that Job grants it. No role can connect to another's database,
-- and none is a superuser or may create roles or databases.
\set ON_ERROR_STOP on

CREATE ROLE stockade_decision LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION
    CONNECTION LIMIT 200 PASSWORD :'decision_password';
CREATE ROLE stockade_audit LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION
    CONNECTION LIMIT 200 PASSWORD :'audit_password';
CREATE ROLE stockade_executor LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION
    CONNECTION LIMIT 100 PASSWORD :'executor_password';
CREATE ROLE stockade_executor_admin LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION
    CONNECTION LIMIT 5 PASSWORD :'executor_admin_password';

CREATE DATABASE stockade_decision OWNER stockade_decision;
CREATE DATABASE stockade_audit OWNER stockade_audit;
CREATE DATABASE stockade_executor OWNER stockade_executor_admin;

-- CONNECT is granted to PUBLIC by default: take it back, so a role reaches only the
-- database it owns (the owner keeps its own rights).
REVOKE ALL ON DATABASE stockade_decision FROM PUBLIC;
REVOKE ALL ON DATABASE stockade_audit FROM PUBLIC;
REVOKE ALL ON DATABASE stockade_executor FROM PUBLIC;
REVOKE ALL ON DATABASE postgres FROM PUBLIC;
REVOKE ALL ON DATABASE template1 FROM PUBLIC;
GRANT CONNECT ON DATABASE stockade_executor TO stockade_executor;

-- Inside the executor's database, nobody but its owner may create anything (PostgreSQL
-- 15 and later already keep PUBLIC from creating in schema public; 14 does not).
\connect stockade_executor
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
