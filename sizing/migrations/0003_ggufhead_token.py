# Uploaded GGUF heads are named in URLs by an unguessable token, not their sequential id.

from django.db import migrations, models

import sizing.models


def give_each_head_a_token(apps, schema_editor):
    GgufHead = apps.get_model("sizing", "GgufHead")
    for head in GgufHead.objects.only("pk").iterator():
        GgufHead.objects.filter(pk=head.pk).update(token=sizing.models.new_slug())


class Migration(migrations.Migration):
    dependencies = [
        ("sizing", "0002_snapshot_view"),
    ]

    operations = [
        migrations.AddField(
            model_name="ggufhead",
            name="token",
            field=models.CharField(max_length=16, null=True),
        ),
        migrations.RunPython(give_each_head_a_token, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="ggufhead",
            name="token",
            field=models.CharField(default=sizing.models.new_slug, max_length=16, unique=True),
        ),
    ]
