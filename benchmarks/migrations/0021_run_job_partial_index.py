"""A run's job is indexed only where it is set (run_job_idx): an import's runs have none, and each paid
for an entry of the job index it never used.

The foreign key's own index is dropped by name rather than by AlterField, which on SQLite would copy
the whole runs table to change nothing but the index; the name is the one Django gave it on every engine.
"""

import django.db.models.deletion
from django.db import migrations, models

OLD_INDEX = "benchmarks_run_job_id_93d56920"


class Migration(migrations.Migration):
    dependencies = [
        ("benchmarks", "0020_request_identity"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="run",
                    name="job",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="runs",
                        to="benchmarks.job",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    f'DROP INDEX IF EXISTS "{OLD_INDEX}"',
                    reverse_sql=f'CREATE INDEX "{OLD_INDEX}" ON "benchmarks_run" ("job_id")',
                ),
            ],
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(condition=models.Q(("job__isnull", False)), fields=["job"], name="run_job_idx"),
        ),
    ]
