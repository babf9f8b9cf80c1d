CREATE TABLE "usage_slot_groups" (
	"org_id" text NOT NULL,
	"slot" timestamp with time zone NOT NULL,
	"engine" text NOT NULL,
	"model" text NOT NULL,
	"user_id" text NOT NULL,
	"runs" integer NOT NULL,
	"succeeded" integer NOT NULL,
	"failed" integer NOT NULL,
	"input_tokens" bigint NOT NULL,
	"output_tokens" bigint NOT NULL,
	"duration_ms" bigint NOT NULL,
	CONSTRAINT "usage_slot_groups_org_id_slot_engine_model_user_id_pk" PRIMARY KEY("org_id","slot","engine","model","user_id")
);
--> statement-breakpoint
CREATE TABLE "usage_slots" (
	"org_id" text NOT NULL,
	"slot" timestamp with time zone NOT NULL,
	"runs" integer NOT NULL,
	"succeeded" integer NOT NULL,
	"failed" integer NOT NULL,
	"input_tokens" bigint NOT NULL,
	"output_tokens" bigint NOT NULL,
	"duration_ms" bigint NOT NULL,
	CONSTRAINT "usage_slots_org_id_slot_pk" PRIMARY KEY("org_id","slot")
);
--> statement-breakpoint
ALTER TABLE "runs" ADD COLUMN "input_tokens" integer;--> statement-breakpoint
ALTER TABLE "runs" ADD COLUMN "output_tokens" integer;--> statement-breakpoint
ALTER TABLE "usage_slot_groups" ADD CONSTRAINT "usage_slot_groups_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "usage_slots" ADD CONSTRAINT "usage_slots_org_id_organizations_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."organizations"("id") ON DELETE cascade ON UPDATE no action;