-- The console's signed-in people: a cookie's token is kept as its SHA-256 only, with who it
-- is, the CSRF token of its forms and when it expires (shared by every instance).
CREATE TABLE console_sessions (
    digest      TEXT    NOT NULL PRIMARY KEY,
    tenant      TEXT    NOT NULL,
    principal   TEXT    NOT NULL,
    role        TEXT    NOT NULL,
    csrf        TEXT    NOT NULL,
    created_at  BIGINT  NOT NULL,
    expires_at  BIGINT  NOT NULL
);
CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);

-- What the console's instances page shows of each instance.
ALTER TABLE journal_instances ADD COLUMN version TEXT;
ALTER TABLE journal_instances ADD COLUMN address TEXT;
ALTER TABLE journal_instances ADD COLUMN in_flight BIGINT;

-- A tenant's sessions newest first (the console's sessions page).
CREATE INDEX sessions_tenant_time ON sessions (tenant, created_at);

-- A tenant's decided approvals, newest first (the console's inbox lists them under the waiting).
CREATE INDEX pending_approvals_decided ON pending_approvals (tenant, decided_at);
