"""The job form is usable without reading the code: only the chosen prompt source's input
shows, and it says when fewer requests than the concurrency are asked for."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from playwright.sync_api import Page, expect

from benchmarks.models import Server

NOTE = "Only 1 request per repeat: at most 1 in flight at once, so a concurrency of 3 is never reached."


@pytest.mark.django_db
def test_each_prompt_input_names_its_source(user_client):
    page = user_client.get(reverse("job-new")).content.decode()
    for name, source in (("prompt_text", "text"), ("prompt_file", "file"), ("prompt_tokens", "synthetic")):
        assert f'<p data-prompt-source="{source}"><label for="id_{name}">' in page
    assert 'src="/static/js/job-form.js"' in page


@pytest.mark.django_db
def test_a_submitted_form_says_when_requests_are_fewer_than_the_concurrency(user_client):
    server = Server.objects.create(name="s", base_url="http://127.0.0.1:9")
    form = {"server": server.pk, "prompt_source": "text", "prompt_text": "", "n_predict": 8, "timeout_s": 5}
    page = user_client.post(reverse("job-new"), {**form, "requests": 1, "concurrency": 3, "repeats": 1})
    assert page.status_code == 400 and NOTE in page.content.decode()  # the form's own error, and the note
    page = user_client.post(reverse("job-new"), {**form, "requests": 3, "concurrency": 3, "repeats": 1})
    assert "is never reached" not in page.content.decode()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_form_shows_the_chosen_prompt_source_and_the_concurrency_note_as_you_type(tab):
    User.objects.create_user("ana", password="a-long-test-password")
    tab.open("/accounts/login/", {"next": "/jobs/new/"})

    def use_the_form(page: Page) -> None:
        page.get_by_label("Username").fill("ana")
        page.get_by_label("Password").fill("a-long-test-password")
        page.get_by_role("button", name="Log in", exact=True).click()
        page.wait_for_url("**/jobs/new/")
        text, tokens = page.locator("[data-prompt-source=text]"), page.locator("[data-prompt-source=synthetic]")
        expect(text).to_be_visible()
        expect(tokens).to_be_hidden()
        page.select_option("select[name=prompt_source]", "synthetic")
        expect(text).to_be_hidden()
        expect(tokens).to_be_visible()
        expect(page.locator("[data-prompt-source=file]")).to_be_hidden()
        page.get_by_label("Concurrency").fill("3")
        page.get_by_label("Requests").fill("1")
        expect(page.locator("#concurrency-note")).to_have_text(NOTE)
        page.get_by_label("Requests").fill("4")
        expect(page.locator("#concurrency-note")).to_have_text("")
        rate, rates = page.locator("#id_rate"), page.locator("#id_rates")
        expect(rate).to_be_hidden()  # fixed concurrency: no rate to give
        expect(rates).to_be_hidden()
        page.select_option("select[name=arrival]", "poisson")
        expect(rate).to_be_visible()
        expect(rates).to_be_visible()
        page.select_option("select[name=arrival]", "")
        expect(rate).to_be_hidden()

    tab.do(use_the_form)
    tab.screenshot("job-form")
    tab.assert_no_errors()
