ALTER TABLE "memory_captures" ADD COLUMN "added_count" integer;--> statement-breakpoint
ALTER TABLE "memory_captures" ADD COLUMN "merged_count" integer;--> statement-breakpoint
ALTER TABLE "memory_settings" ADD COLUMN "extract" boolean DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE "runs" ADD COLUMN "remembered" jsonb;