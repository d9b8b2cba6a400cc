"""Launch hosts are announced by their workers; the web form no longer names binaries.

A host created from the web form before this keeps its sweeps and is not launchable
until the worker on that machine announces it. Its old binary and models directory
are kept in its notes, for the admin to move into the worker's KVLAB_LAUNCH_* settings.
"""

from django.db import migrations, models


def keep_old_paths_in_notes(apps, schema_editor):
    LaunchHost = apps.get_model("benchmarks", "LaunchHost")
    for host in LaunchHost.objects.all():
        old = (
            f"Before kvlab read launch settings from the worker, this host listed binary {host.binary_path} "
            f"and models directory {host.models_dir}. Set them on that machine as KVLAB_LAUNCH_BINARIES "
            "and KVLAB_LAUNCH_MODELS_DIRS; its worker announces them when it starts."
        )
        host.notes = f"{host.notes}\n\n{old}".strip()
        host.save(update_fields=["notes"])


class Migration(migrations.Migration):
    dependencies = [
        ("benchmarks", "0006_job_live"),
    ]

    operations = [
        migrations.AddField(
            model_name="launchhost",
            name="announced_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="launchhost",
            name="binaries",
            field=models.JSONField(default=list, help_text="llama-server binaries the worker lists"),
        ),
        migrations.AddField(
            model_name="launchhost",
            name="gguf_files",
            field=models.JSONField(default=list, help_text='the .gguf files found there: [{"file", "bytes"}]'),
        ),
        migrations.AddField(
            model_name="launchhost",
            name="models_dirs",
            field=models.JSONField(default=list, help_text="model directories the worker lists"),
        ),
        migrations.AddField(
            model_name="launchhost",
            name="problems",
            field=models.JSONField(default=list, help_text="settings the worker refused, with the reason"),
        ),
        migrations.AddField(
            model_name="launchhost",
            name="worker",
            field=models.CharField(blank=True, help_text="the worker that announced it", max_length=200),
        ),
        migrations.AddField(
            model_name="sweep",
            name="binary",
            field=models.CharField(
                blank=True, help_text="one of the host's binaries; blank: its first", max_length=500
            ),
        ),
        migrations.RunPython(keep_old_paths_in_notes, migrations.RunPython.noop),
    ]
