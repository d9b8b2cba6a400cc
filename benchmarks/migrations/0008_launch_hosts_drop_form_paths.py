"""The old paths were moved into the hosts' notes by 0007; the columns go (a migration of their own:
on PostgreSQL the data change and the ALTER TABLE are not mixed in one transaction)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("benchmarks", "0007_launch_hosts_announced_by_workers")]

    operations = [
        migrations.RemoveField(model_name="launchhost", name="binary_path"),
        migrations.RemoveField(model_name="launchhost", name="models_dir"),
    ]
