"""The security baseline across every write endpoint: login, staff, CSRF; secrets never shown."""

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from benchmarks.history.exporter import export_lines
from benchmarks.models import Job, LaunchHost, Run, Server, Sweep

pytestmark = pytest.mark.django_db
SECRET = "sk-kvlab-test-0123456789abcdef"


@pytest.fixture
def objects(tmp_path):
    server = Server.objects.create(name="s", base_url="http://127.0.0.1:9", api_key=SECRET)
    job = Job.objects.create(server=server, params={"requests": 1})
    host = LaunchHost.objects.create(name="h", binaries=["/x"], models_dirs=[str(tmp_path)])
    sweep = Sweep.objects.create(host=host, model_file="m.gguf", params={})
    return {"server": server.pk, "job": job.pk, "host": host.pk, "sweep": sweep.pk}


# (url name, args key or None, staff only; "owner": the user who created it, or staff)
WRITES = [
    ("import-upload", None, False),
    ("job-new", None, False),
    ("job-cancel", "job", "owner"),
    ("sizing-gguf", None, False),
    ("sizing-share", None, False),
    ("server-new", None, True),
    ("server-edit", "server", True),
    ("server-probe", "server", True),
    ("host-edit", "host", True),
    ("host-refresh", None, True),
    ("sweep-new", None, True),
    ("sweep-demo", None, True),
    ("sweep-cancel", "sweep", "owner"),
]


def url(name, key, objects):
    return reverse(name, args=[objects[key]] if key else [])


@pytest.mark.parametrize(("name", "key", "staff_only"), WRITES)
def test_anonymous_users_cannot_write(client, objects, name, key, staff_only):
    response = client.post(url(name, key, objects), {})
    assert response.status_code == 302 and "login" in response.url


@pytest.mark.parametrize(("name", "key", "staff_only"), [w for w in WRITES if w[2] is True])
def test_staff_only_writes_refuse_other_users(objects, name, key, staff_only):
    client = Client()
    client.force_login(User.objects.create_user("plain", password="a-long-test-password"))
    before = (Server.objects.count(), LaunchHost.objects.count(), Sweep.objects.count())
    response = client.post(url(name, key, objects), {"name": "x", "base_url": "http://127.0.0.1:1"})
    assert response.status_code == 302 and "login" in response.url
    assert (Server.objects.count(), LaunchHost.objects.count(), Sweep.objects.count()) == before


@pytest.mark.parametrize(("name", "key", "model"), [("job-cancel", "job", Job), ("sweep-cancel", "sweep", Sweep)])
def test_only_its_creator_or_staff_may_cancel_a_job_or_sweep(objects, name, key, model):
    owner = User.objects.create_user("owner", password="a-long-test-password")
    model.objects.filter(pk=objects[key]).update(created_by=owner)
    other = Client()
    other.force_login(User.objects.create_user("plain", password="a-long-test-password"))
    assert other.post(url(name, key, objects)).status_code == 403
    assert model.objects.get(pk=objects[key]).state == "queued"
    creator = Client()
    creator.force_login(owner)
    assert creator.post(url(name, key, objects)).status_code == 302
    assert model.objects.get(pk=objects[key]).state == "cancelled"


@pytest.mark.parametrize(("name", "key", "model"), [("job-cancel", "job", Job), ("sweep-cancel", "sweep", Sweep)])
def test_staff_may_cancel_anyones_job_or_sweep(objects, name, key, model):
    staff = Client()
    staff.force_login(User.objects.create_user("root", password="a-long-test-password", is_staff=True))
    assert staff.post(url(name, key, objects)).status_code == 302
    found = model.objects.get(pk=objects[key])
    assert (found.state, found.error) == ("cancelled", "cancelled before it ran")


@pytest.mark.parametrize(("name", "key", "staff_only"), WRITES)
def test_every_write_needs_the_csrf_token(objects, name, key, staff_only):
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.create_user("root", password="a-long-test-password", is_staff=True))
    response = client.post(url(name, key, objects), {})
    assert response.status_code == 403


def test_the_api_key_never_leaves_the_database(client, objects, caplog):
    caplog.set_level("DEBUG")
    server = Server.objects.get(pk=objects["server"])
    staff = Client()
    staff.force_login(User.objects.create_user("root", password="a-long-test-password", is_staff=True))
    staff.post(reverse("server-probe", args=[server.pk]))  # unreachable: its error is stored and shown
    server.refresh_from_db()
    assert SECRET not in str(server.last_probe)
    pages = [
        reverse("server-list"),
        reverse("server-detail", args=[server.pk]),
        reverse("server-edit", args=[server.pk]),
        reverse("job-detail", args=[objects["job"]]),
        reverse("job-list"),
    ]
    for page in pages:
        assert SECRET not in staff.get(page).content.decode(), page
    run = Run.objects.create(key="job-run", model="m", job_id=objects["job"], server_props={"props": {}})
    run.requests.create(seq=0, ok=True, content_hash="0" * 32)
    assert SECRET.encode() not in b"".join(export_lines(Run.objects.all()))
    assert SECRET not in caplog.text  # nor in any log record, at any level


def test_admin_needs_staff(client, user_client):
    assert client.get("/admin/").status_code == 302
    assert user_client.get("/admin/").status_code == 302


@pytest.mark.parametrize(("page", "key", "label"), [("job-detail", "job", "Job "), ("sweep-detail", "sweep", "Sweep ")])
def test_job_and_sweep_pages_are_open_to_read_and_offer_cancel_only_to_who_may(objects, page, key, label):
    target = url(page, key, objects)
    model = Job if key == "job" else Sweep
    owner = User.objects.create_user("owner", password="a-long-test-password")
    model.objects.filter(pk=objects[key]).update(created_by=owner)
    cancel = url(page.replace("detail", "cancel"), key, objects)
    anonymous = Client().get(target).content.decode()
    assert f"{label}{objects[key]}" in anonymous and cancel not in anonymous
    other = Client()
    other.force_login(User.objects.create_user("plain", password="a-long-test-password"))
    assert cancel not in other.get(target).content.decode()
    creator = Client()
    creator.force_login(owner)
    assert cancel in creator.get(target).content.decode()


def test_job_and_sweep_lists_are_open_to_read(client, objects):
    assert f'href="{url("job-detail", "job", objects)}"' in client.get(reverse("job-list")).content.decode()
    assert f'href="{url("sweep-detail", "sweep", objects)}"' in client.get(reverse("sweep-list")).content.decode()
