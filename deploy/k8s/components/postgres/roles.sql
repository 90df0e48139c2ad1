-- One role and one database per Stockade service, run once by the postgres superuser
-- when the data volume is new (init-stockade.sh passes the passwords as psql variables,
-- so they never appear in this file or in a process list).
--
-- Each role owns its database and can connect to nothing else: the executor, the most
-- exposed component, cannot read or change the decision service's sessions and grants or
-- the audit trail (STORE-3), and no role is a superuser or may create roles or databases.
\set ON_ERROR_STOP on

CREATE ROLE stockade_decision LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION
    CONNECTION LIMIT 200 PASSWORD :'decision_password';
CREATE ROLE stockade_audit LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION
    CONNECTION LIMIT 200 PASSWORD :'audit_password';
CREATE ROLE stockade_executor LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION
    CONNECTION LIMIT 100 PASSWORD :'executor_password';

CREATE DATABASE stockade_decision OWNER stockade_decision;
CREATE DATABASE stockade_audit OWNER stockade_audit;
CREATE DATABASE stockade_executor OWNER stockade_executor;

-- CONNECT is granted to PUBLIC by default: take it back, so a role reaches only the
-- database it owns (the owner keeps its own rights).
REVOKE ALL ON DATABASE stockade_decision FROM PUBLIC;
REVOKE ALL ON DATABASE stockade_audit FROM PUBLIC;
REVOKE ALL ON DATABASE stockade_executor FROM PUBLIC;
REVOKE ALL ON DATABASE postgres FROM PUBLIC;
REVOKE ALL ON DATABASE template1 FROM PUBLIC;
