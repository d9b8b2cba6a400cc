"""A run page's failures by type read only the failed requests of a run (not every request of a million-request run)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("benchmarks", "0008_launch_hosts_drop_form_paths")]

    operations = [
        migrations.AddIndex(
            model_name="requestresult",
            index=models.Index(
                condition=models.Q(("ok", False)), fields=["run", "error_type"], name="request_failed_idx"
            ),
        ),
    ]
