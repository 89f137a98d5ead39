-- The schema a database made by looping-core 0.1.0 has after core migration 1 (SQLite).
-- tests/store/test_migrations.py upgrades it.
CREATE TABLE "core_migration" ("version" INTEGER NOT NULL PRIMARY KEY, "name" TEXT NOT NULL, "applied_at" DATETIME NOT NULL);
CREATE TABLE "plugin_migration" ("plugin" TEXT NOT NULL PRIMARY KEY, "version" INTEGER NOT NULL, "updated_at" DATETIME NOT NULL);
CREATE TABLE "tasks" ("id" TEXT NOT NULL PRIMARY KEY, "tenant" TEXT NOT NULL, "issuer" TEXT NOT NULL, "subject" TEXT NOT NULL, "context_id" TEXT NOT NULL, "state" INTEGER NOT NULL, "status_message" TEXT, "status_ts" INTEGER NOT NULL, "created_ts" INTEGER NOT NULL);
CREATE INDEX "tasks_tenant_issuer_subject_status_ts" ON "tasks" ("tenant", "issuer", "subject", "status_ts");
CREATE TABLE "messages" ("seq" INTEGER NOT NULL PRIMARY KEY, "task_id" TEXT NOT NULL, "tenant" TEXT NOT NULL, "issuer" TEXT NOT NULL, "subject" TEXT NOT NULL, "message_id" TEXT NOT NULL, "body" TEXT NOT NULL, FOREIGN KEY ("task_id") REFERENCES "tasks" ("id") ON DELETE CASCADE);
CREATE INDEX "messages_task_id" ON "messages" ("task_id");
CREATE UNIQUE INDEX "messages_tenant_issuer_subject_message_id" ON "messages" ("tenant", "issuer", "subject", "message_id");
CREATE TABLE "push_outbox" ("id" INTEGER NOT NULL PRIMARY KEY, "task_id" TEXT NOT NULL, "config_id" TEXT NOT NULL, "jti" TEXT NOT NULL, "url" TEXT NOT NULL, "body" TEXT NOT NULL, "state" TEXT NOT NULL, "attempts" INTEGER NOT NULL, "next_attempt_ts" INTEGER NOT NULL, "created_ts" INTEGER NOT NULL);
CREATE UNIQUE INDEX "push_outbox_jti" ON "push_outbox" ("jti");
CREATE INDEX "push_outbox_state_next_attempt_ts" ON "push_outbox" ("state", "next_attempt_ts");
CREATE TABLE "push_attempts" ("id" INTEGER NOT NULL PRIMARY KEY, "outbox_id" INTEGER NOT NULL, "attempt" INTEGER NOT NULL, "at_ts" INTEGER NOT NULL, "status" INTEGER, "error" TEXT, "duration_ms" INTEGER NOT NULL, FOREIGN KEY ("outbox_id") REFERENCES "push_outbox" ("id") ON DELETE CASCADE);
CREATE INDEX "push_attempts_outbox_id" ON "push_attempts" ("outbox_id");
CREATE TABLE "push_configs" ("seq" INTEGER NOT NULL PRIMARY KEY, "task_id" TEXT NOT NULL, "config_id" TEXT NOT NULL, "body" TEXT NOT NULL, FOREIGN KEY ("task_id") REFERENCES "tasks" ("id") ON DELETE CASCADE);
CREATE INDEX "push_configs_task_id" ON "push_configs" ("task_id");
CREATE UNIQUE INDEX "push_configs_task_id_config_id" ON "push_configs" ("task_id", "config_id");
CREATE TABLE "artifacts" ("seq" INTEGER NOT NULL PRIMARY KEY, "task_id" TEXT NOT NULL, "artifact_id" TEXT NOT NULL, "body" TEXT NOT NULL, FOREIGN KEY ("task_id") REFERENCES "tasks" ("id") ON DELETE CASCADE);
CREATE INDEX "artifacts_task_id" ON "artifacts" ("task_id");
CREATE UNIQUE INDEX "artifacts_task_id_artifact_id" ON "artifacts" ("task_id", "artifact_id");
