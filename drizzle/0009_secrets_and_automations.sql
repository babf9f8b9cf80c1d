CREATE TABLE "automation_fires" (
	"automation_id" text NOT NULL,
	"scheduled_for" timestamp with time zone NOT NULL,
	"org_id" text NOT NULL,
	"fired_at" timestamp with time zone DEFAULT now() NOT NULL,
	"run_id" text NOT NULL,
	CONSTRAINT "automation_fires_automation_id_scheduled_for_pk" PRIMARY KEY("automation_id","scheduled_for")
);
--> statement-breakpoint
CREATE TABLE "automations" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"name" text NOT NULL,
	"cron" text NOT NULL,
	"timezone" text NOT NULL,
	"target" jsonb NOT NULL,
	"skill_id" text,
	"playbook_id" text,
	"enabled" boolean DEFAULT true NOT NULL,
	"catch_up" text DEFAULT 'latest' NOT NULL,
	"next_fire_at" timestamp with time zone,
	"last_fired_at" timestamp with time zone,
	"last_run_id" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	"created_by" text,
	CONSTRAINT "automations_catch_up_check" CHECK ("automations"."catch_up" in ('latest', 'skip'))
);
--> statement-breakpoint
CREATE TABLE "secrets" (
	"org_id" text NOT NULL,
	"name" text NOT NULL,
	"key_id" text NOT NULL,
	"sealed" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_by" text,
	"last_used_at" timestamp with time zone,
	CONSTRAINT "secrets_org_id_name_pk" PRIMARY KEY("org_id","name")
);
--> statement-breakpoint
ALTER TABLE "runs" ADD COLUMN "secret_names" jsonb DEFAULT '[]'::jsonb NOT NULL;--> statement-breakpoint
ALTER TABLE "automation_fires" ADD CONSTRAINT "automation_fires_automation_id_automations_id_fk" FOREIGN KEY ("automation_id") REFERENCES "public"."automations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "automations" ADD CONSTRAINT "automations_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "automations" ADD CONSTRAINT "automations_skill_id_skills_id_fk" FOREIGN KEY ("skill_id") REFERENCES "public"."skills"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "automations" ADD CONSTRAINT "automations_playbook_id_playbooks_id_fk" FOREIGN KEY ("playbook_id") REFERENCES "public"."playbooks"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "secrets" ADD CONSTRAINT "secrets_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "automations_org_idx" ON "automations" USING btree ("org_id","id");--> statement-breakpoint
CREATE INDEX "automations_due_idx" ON "automations" USING btree ("next_fire_at") WHERE enabled and next_fire_at is not null;