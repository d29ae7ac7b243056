-- Records of the tools that keep data (memory first; documents and knowledge bases later): each
-- owned by a tenant's person, optionally tied to a project, found by full text (FTS5 over title
-- and body, Porter stemming). Times are Unix milliseconds; metadata is JSON text.
CREATE TABLE records (
    tenant      TEXT    NOT NULL,
    id          TEXT    NOT NULL,
    collection  TEXT    NOT NULL,
    person      TEXT    NOT NULL,
    project     TEXT,
    tag         TEXT    NOT NULL,
    title       TEXT    NOT NULL,
    body        TEXT    NOT NULL,
    metadata    TEXT    NOT NULL,
    created_at  BIGINT  NOT NULL,
    updated_at  BIGINT  NOT NULL,
    PRIMARY KEY (tenant, id)
);

CREATE INDEX records_owner ON records (tenant, collection, person, updated_at);

CREATE VIRTUAL TABLE records_fts USING fts5(
    title, body, content = 'records', content_rowid = 'rowid', tokenize = 'porter unicode61'
);

CREATE TRIGGER records_fts_insert AFTER INSERT ON records BEGIN
    INSERT INTO records_fts (rowid, title, body) VALUES (new.rowid, new.title, new.body);
END;

CREATE TRIGGER records_fts_delete AFTER DELETE ON records BEGIN
    INSERT INTO records_fts (records_fts, rowid, title, body) VALUES ('delete', old.rowid, old.title, old.body);
END;

CREATE TRIGGER records_fts_update AFTER UPDATE ON records BEGIN
    INSERT INTO records_fts (records_fts, rowid, title, body) VALUES ('delete', old.rowid, old.title, old.body);
    INSERT INTO records_fts (rowid, title, body) VALUES (new.rowid, new.title, new.body);
END;
