CREATE TABLE "artifact_proposals" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"artifact_id" text NOT NULL,
	"base_version" integer NOT NULL,
	"summary" text,
	"state" text DEFAULT 'open' NOT NULL,
	"run_id" text,
	"size" bigint NOT NULL,
	"sha256" text NOT NULL,
	"content_type" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"created_by" text,
	"decided_at" timestamp with time zone,
	"decided_by" text,
	CONSTRAINT "artifact_proposals_state_check" CHECK ("artifact_proposals"."state" in ('open', 'accepted', 'rejected'))
);
--> statement-breakpoint
CREATE TABLE "artifact_versions" (
	"org_id" text NOT NULL,
	"artifact_id" text NOT NULL,
	"version" integer NOT NULL,
	"size" bigint NOT NULL,
	"sha256" text NOT NULL,
	"content_type" text NOT NULL,
	"source" text NOT NULL,
	"run_id" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"created_by" text,
	CONSTRAINT "artifact_versions_artifact_id_version_pk" PRIMARY KEY("artifact_id","version"),
	CONSTRAINT "artifact_versions_source_check" CHECK ("artifact_versions"."source" in ('run', 'api', 'edit', 'proposal'))
);
--> statement-breakpoint
CREATE TABLE "artifacts" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"run_id" text,
	"root_run_id" text,
	"name" text NOT NULL,
	"content_type" text NOT NULL,
	"size" bigint NOT NULL,
	"sha256" text NOT NULL,
	"version" integer NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	"created_by" text
);
--> statement-breakpoint
CREATE TABLE "blobs" (
	"org_id" text NOT NULL,
	"sha256" text NOT NULL,
	"size" bigint NOT NULL,
	"pinned_until" timestamp with time zone NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "blobs_org_id_sha256_pk" PRIMARY KEY("org_id","sha256")
);
--> statement-breakpoint
CREATE TABLE "uploads" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"name" text NOT NULL,
	"size" bigint NOT NULL,
	"content_type" text NOT NULL,
	"sha256" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"created_by" text
);
--> statement-breakpoint
ALTER TABLE "artifact_proposals" ADD CONSTRAINT "artifact_proposals_artifact_id_artifacts_id_fk" FOREIGN KEY ("artifact_id") REFERENCES "public"."artifacts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "artifact_versions" ADD CONSTRAINT "artifact_versions_artifact_id_artifacts_id_fk" FOREIGN KEY ("artifact_id") REFERENCES "public"."artifacts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "artifacts" ADD CONSTRAINT "artifacts_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "blobs" ADD CONSTRAINT "blobs_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "uploads" ADD CONSTRAINT "uploads_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "artifact_proposals_artifact_idx" ON "artifact_proposals" USING btree ("org_id","artifact_id","id");--> statement-breakpoint
CREATE INDEX "artifact_proposals_blob_idx" ON "artifact_proposals" USING btree ("org_id","sha256");--> statement-breakpoint
CREATE INDEX "artifact_versions_blob_idx" ON "artifact_versions" USING btree ("org_id","sha256");--> statement-breakpoint
CREATE INDEX "artifacts_org_idx" ON "artifacts" USING btree ("org_id","id");--> statement-breakpoint
CREATE INDEX "artifacts_org_run_idx" ON "artifacts" USING btree ("org_id","run_id","id");--> statement-breakpoint
CREATE INDEX "artifacts_org_root_idx" ON "artifacts" USING btree ("org_id","root_run_id","id");--> statement-breakpoint
CREATE UNIQUE INDEX "artifacts_run_name_idx" ON "artifacts" USING btree ("org_id","run_id","name") WHERE run_id is not null;--> statement-breakpoint
CREATE INDEX "blobs_pinned_idx" ON "blobs" USING btree ("pinned_until");--> statement-breakpoint
CREATE INDEX "uploads_org_idx" ON "uploads" USING btree ("org_id","id");--> statement-breakpoint
CREATE INDEX "uploads_blob_idx" ON "uploads" USING btree ("org_id","sha256");