ALTER TABLE "runs" ADD COLUMN "output" text;--> statement-breakpoint
ALTER TABLE "runs" ADD COLUMN "instructions" text;--> statement-breakpoint
ALTER TABLE "runs" ADD COLUMN "settings" jsonb DEFAULT '{}'::jsonb NOT NULL;--> statement-breakpoint
ALTER TABLE "runs" ADD COLUMN "attachments" jsonb DEFAULT '[]'::jsonb NOT NULL;