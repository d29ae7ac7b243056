-- The journal of tool calls, instances, approvals, remembered decisions and sessions (Postgres).
-- JSON is stored as JSONB, times as Unix milliseconds.

CREATE TABLE tool_call_attempts (
    tenant          TEXT    NOT NULL,
    key             TEXT    NOT NULL CHECK (key <> ''),
    call_id         TEXT    NOT NULL,
    message_id      TEXT,
    session_id      TEXT    NOT NULL,
    parent_call_id  TEXT,
    user_id         TEXT,
    agent_id        TEXT,
    tool            TEXT    NOT NULL,
    api             TEXT    NOT NULL,
    function_name   TEXT    NOT NULL,
    arguments       JSONB   NOT NULL,
    tier            TEXT,
    instance_id     TEXT    NOT NULL,
    status          TEXT    NOT NULL CHECK (status IN ('proposed', 'executed', 'confirmed', 'compensated', 'failed', 'blocked', 'denied', 'abandoned')),
    result          JSONB,
    error_kind      TEXT,
    error           TEXT,
    decision        TEXT,
    decided_by      TEXT,
    duration_ms     BIGINT,
    exit_status     INTEGER,
    attempted_at    BIGINT  NOT NULL,
    updated_at      BIGINT  NOT NULL,
    -- insertion order: breaks ties between rows proposed in the same millisecond
    seq             BIGINT  GENERATED ALWAYS AS IDENTITY,
    PRIMARY KEY (tenant, key)
);

CREATE INDEX tool_call_attempts_session ON tool_call_attempts (tenant, session_id, attempted_at);
CREATE INDEX tool_call_attempts_tenant_status ON tool_call_attempts (tenant, status, attempted_at);
CREATE INDEX tool_call_attempts_status ON tool_call_attempts (status, attempted_at);
CREATE INDEX tool_call_attempts_tool ON tool_call_attempts (tenant, tool, attempted_at);

-- Every row is updated once after its insert (its status, which is indexed, so never a HOT
-- update): vacuum and analyze it sooner than the defaults (20 % / 10 % of the table).
ALTER TABLE tool_call_attempts SET (autovacuum_vacuum_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.02);

CREATE TABLE journal_instances (
    id            TEXT    NOT NULL PRIMARY KEY,
    host          TEXT    NOT NULL,
    pid           BIGINT  NOT NULL,
    start_ticks   BIGINT,
    started_at    BIGINT  NOT NULL,
    heartbeat_at  BIGINT  NOT NULL
);

CREATE TABLE pending_approvals (
    tenant       TEXT    NOT NULL,
    id           TEXT    NOT NULL,
    session_id   TEXT    NOT NULL,
    attempt_key  TEXT    NOT NULL,
    call_id      TEXT    NOT NULL,
    tool         TEXT    NOT NULL,
    api          TEXT    NOT NULL,
    arguments    JSONB   NOT NULL,
    reason       TEXT    NOT NULL,
    status       TEXT    NOT NULL,
    decision     JSONB,
    decided_by   TEXT,
    created_at   BIGINT  NOT NULL,
    decided_at   BIGINT,
    PRIMARY KEY (tenant, id)
);

CREATE INDEX pending_approvals_status ON pending_approvals (tenant, status, created_at);

CREATE TABLE remembered_decisions (
    tenant           TEXT    NOT NULL,
    id               TEXT    NOT NULL,
    project          TEXT    NOT NULL,
    tool             TEXT    NOT NULL,
    api              TEXT    NOT NULL,
    argument_prefix  TEXT,
    created_by       TEXT,
    created_at       BIGINT  NOT NULL,
    PRIMARY KEY (tenant, id)
);

CREATE INDEX remembered_decisions_project ON remembered_decisions (tenant, project);

CREATE TABLE sessions (
    tenant      TEXT    NOT NULL,
    id          TEXT    NOT NULL,
    user_id     TEXT,
    config      JSONB   NOT NULL,
    status      TEXT    NOT NULL,
    created_at  BIGINT  NOT NULL,
    ended_at    BIGINT,
    PRIMARY KEY (tenant, id)
);
