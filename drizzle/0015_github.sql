CREATE TABLE "github_cache" (
	"org_id" text NOT NULL,
	"request" text NOT NULL,
	"etag" text NOT NULL,
	"body" jsonb NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "github_cache_org_id_request_pk" PRIMARY KEY("org_id","request")
);
--> statement-breakpoint
CREATE TABLE "github_wiki_pages" (
	"org_id" text NOT NULL,
	"repo" text NOT NULL,
	"path" text NOT NULL,
	"record_id" text NOT NULL,
	"commit" text NOT NULL,
	"cited" jsonb NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "github_wiki_pages_org_id_repo_path_pk" PRIMARY KEY("org_id","repo","path")
);
--> statement-breakpoint
CREATE TABLE "github_wiki_runs" (
	"run_id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"repo" text NOT NULL,
	"ref" text NOT NULL,
	"commit" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "github_cache" ADD CONSTRAINT "github_cache_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "github_wiki_pages" ADD CONSTRAINT "github_wiki_pages_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "github_wiki_runs" ADD CONSTRAINT "github_wiki_runs_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "github_wiki_runs_org_idx" ON "github_wiki_runs" USING btree ("org_id","repo");