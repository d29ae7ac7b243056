-- Records of the tools that keep data (memory first; documents and knowledge bases later): each
-- owned by a tenant's person, optionally tied to a project, found by full text (a generated
-- tsvector, English stemming, the title weighted above the body). Times are Unix milliseconds.
CREATE TABLE records (
    tenant      TEXT    NOT NULL,
    id          TEXT    NOT NULL,
    collection  TEXT    NOT NULL,
    person      TEXT    NOT NULL,
    project     TEXT,
    tag         TEXT    NOT NULL,
    title       TEXT    NOT NULL,
    body        TEXT    NOT NULL,
    metadata    JSONB   NOT NULL,
    created_at  BIGINT  NOT NULL,
    updated_at  BIGINT  NOT NULL,
    search      TSVECTOR GENERATED ALWAYS AS (
        setweight(to_tsvector('english', title), 'A') || setweight(to_tsvector('english', body), 'B')
    ) STORED,
    PRIMARY KEY (tenant, id)
);

CREATE INDEX records_owner ON records (tenant, collection, person, updated_at);
CREATE INDEX records_search ON records USING GIN (search);
