"""Jobs record the address, command line and GPU they measured; sweeps stop borrowing Server rows.

Existing jobs take these from their server. Servers a sweep created for its temporary
llama-server processes ("launched by sweep …") are detached from their jobs and deleted,
so the server list holds only servers a person registered.
"""

import django.db.models.deletion
from django.db import migrations, models


def record_targets(apps, schema_editor):
    Job = apps.get_model("benchmarks", "Job")
    Server = apps.get_model("benchmarks", "Server")
    for server in Server.objects.all().iterator():
        Job.objects.filter(server=server).update(
            base_url=server.base_url, launch_command=server.launch_command, gpu=server.gpu
        )
    borrowed = Server.objects.filter(notes__startswith="launched by sweep ", name__startswith="sweep ")
    Job.objects.filter(server__in=borrowed, sweep_config__isnull=False).update(server=None)
    borrowed.filter(jobs__isnull=True).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("benchmarks", "0004_sweeps"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="base_url",
            field=models.URLField(
                default="", help_text="the address the requests went to", max_length=300, verbose_name="base URL"
            ),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="job",
            name="gpu",
            field=models.CharField(blank=True, max_length=200, verbose_name="GPU"),
        ),
        migrations.AddField(
            model_name="job",
            name="launch_command",
            field=models.TextField(blank=True, help_text="the server's command line: each run's configuration"),
        ),
        migrations.AlterField(
            model_name="job",
            name="server",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="jobs",
                to="benchmarks.server",
            ),
        ),
        migrations.RunPython(record_targets, migrations.RunPython.noop),
    ]
