"""The sizing page in a real browser: what only a browser shows.

The form's fields after an htmx update, a pasted command filling them, a field edited after
it rewriting the command, and a shared snapshot that reads like the page. Screenshots go to
var/screenshots/sizing-*.png.
"""

from __future__ import annotations

import io
import re
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import User
from django.test import Client
from playwright.sync_api import Page, expect

from benchmarks.history.importer import import_bench_file
from benchmarks.models import Run
from benchmarks.tests.browser import Tab  # the browser and tab fixtures come from the root conftest.py
from benchmarks.tests.investigation import FILENAME, investigation_bytes
from sizing.models import SizingSnapshot
from sizing.tests.support import DEVSTRAL_16GB

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PUBLISHED = "llama-server --model devstral.gguf --ctx-size 12288 --slots 1 -ctk q8_0 -ctv q8_0"


def dd(page: Page, term: str) -> Any:
    return page.locator(f"xpath=//dt[normalize-space(.)='{term}']/following-sibling::dd[1]")


def field(page: Page, name: str) -> Any:
    return page.locator(f"#sizing-form [name={name}]")


def test_the_form_shows_what_the_result_used_and_size_it_again_changes_nothing(tab: Tab) -> None:
    # Only a model and a GPU, as the job form's "Size the KV cache for this workload" link gives.
    tab.open("/sizing/", {"model": "devstral-small-2-24b", "gpu": "rtx-5060-ti-16gb", "ctx_size": 16384})

    def check(page: Page) -> None:
        expect(field(page, "type_k")).to_have_value("f16")
        expect(field(page, "type_v")).to_have_value("f16")
        expect(field(page, "n_ubatch")).to_have_value("512")
        expect(dd(page, "KV total")).to_contain_text("2,684,354,560 B (2,560.00 MiB)")
        page.get_by_role("button", name="Size it").click()
        page.wait_for_url(re.compile(r"type_k=f16"))
        page.wait_for_load_state("networkidle")
        expect(dd(page, "KV total")).to_contain_text("2,684,354,560 B (2,560.00 MiB)")  # not f32's 5,120 MiB
        expect(field(page, "type_k")).to_have_value("f16")

    tab.do(check)
    tab.screenshot("sizing-form-shows-what-was-computed")

    def add_a_second_gpu(page: Page) -> None:
        # A second GPU is one more row; the result places the model on both, and the URL keeps both.
        with page.expect_response(lambda r: "quant=Q4_K_M" in r.url and r.status == 200):
            field(page, "quant").fill("Q4_K_M")
            field(page, "quant").press("Tab")
        page.wait_for_load_state("networkidle")
        expect(page.locator("#server-plan h3")).to_have_text("What llama-server will do on this GPU")
        page.get_by_role("button", name="Add a GPU").click()
        rows = page.locator("#gpus .gpu-row")
        expect(rows).to_have_count(2)
        expect(rows.nth(1).locator(".gpu-name")).to_have_text("GPU 1")
        with page.expect_response(
            lambda r: r.url.count("&gpu=") == 2 and "rtx-4060-ti-16gb" in r.url and r.status == 200
        ):
            rows.nth(1).locator("select[name=gpu]").select_option("rtx-4060-ti-16gb")
        page.wait_for_load_state("networkidle")
        plan = page.locator("#server-plan")
        expect(plan.locator("h3")).to_have_text("What llama-server will do on these 2 GPUs")
        expect(plan.locator("table.devices")).to_contain_text("CUDA1 GeForce RTX 4060 Ti 16GB")
        expect(plan.locator("table.devices")).to_contain_text("system RAM")
        expect(plan).to_contain_text("CUDA1 288 GB/s")
        # The address holds both GPUs: opened again, the form shows both rows as the result used them.
        page.reload()
        expect(page.locator("#gpus .gpu-row")).to_have_count(2)
        expect(page.locator("#gpus .gpu-row").nth(1).locator("select[name=gpu]")).to_have_value("rtx-4060-ti-16gb")
        expect(page.locator("#server-plan table.devices")).to_contain_text("CUDA1 GeForce RTX 4060 Ti 16GB")
        # Removing it sizes for one GPU again.
        with page.expect_response(lambda r: "rtx-4060-ti-16gb" not in r.url and r.status == 200):
            page.locator("#gpus .gpu-row").nth(1).get_by_role("button", name="remove").click()
        page.wait_for_load_state("networkidle")
        expect(page.locator("#server-plan h3")).to_have_text("What llama-server will do on this GPU")

    tab.do(add_a_second_gpu)
    tab.screenshot("sizing-two-gpus")
    tab.assert_no_errors()


def test_a_pasted_command_fills_the_fields_and_a_field_edited_after_it_rewrites_it(tab: Tab) -> None:
    tab.open("/sizing/", {k: v for k, v in DEVSTRAL_16GB.items() if k != "ctx_size"})

    def paste(page: Page) -> None:
        with page.expect_response(lambda r: "command=" in r.url and r.status == 200):
            page.get_by_label("or paste a llama-server command").fill(PUBLISHED)
            page.get_by_label("or paste a llama-server command").press("Tab")
        page.wait_for_load_state("networkidle")
        # The fields now show the command's flags.
        expect(field(page, "ctx_size")).to_have_value("12288")
        expect(field(page, "type_k")).to_have_value("q8_0")
        expect(field(page, "type_v")).to_have_value("q8_0")
        expect(field(page, "parallel")).to_have_value("")
        expect(page.locator("#results")).to_contain_text("The flags come from the pasted command")
        # The stray 1 after --slots: llama-server would not start; kvlab points to -np 1.
        refused = page.locator("#results .refused")
        expect(refused).to_contain_text("llama-server will not start with this command")
        expect(refused).to_contain_text("write -np 1")
        expect(dd(page, "slots")).to_have_text("4 (automatic: no -np)")

    tab.do(paste)
    tab.screenshot("sizing-pasted-command")

    def edit_a_field(page: Page) -> None:
        with page.expect_response(lambda r: "parallel=1" in r.url and r.status == 200):
            field(page, "parallel").fill("1")
            field(page, "parallel").press("Tab")
        page.wait_for_load_state("networkidle")
        expect(dd(page, "slots")).to_have_text("1")
        expect(page.locator("#results")).to_contain_text("The flags come from the fields")
        command = page.get_by_label("or paste a llama-server command")
        expect(command).to_have_value(re.compile(r"-c 12288 -np 1 -ctk q8_0 -ctv q8_0 --slots 1$"))

    tab.do(edit_a_field)
    tab.screenshot("sizing-field-rewrites-command")
    # The refused command's half-states are 200s; no error anywhere.
    tab.assert_no_errors()


def test_devstral_on_16_gb_asks_for_the_weights_then_judges_the_fit(tab: Tab) -> None:
    tab.open("/sizing/", DEVSTRAL_16GB)

    def unknown(page: Page) -> None:
        expect(dd(page, "on the GPU")).to_contain_text("cannot judge the fit")
        expect(page.locator("#results .needs")).to_contain_text("the weights' size is unknown")
        expect(page.locator("#results h3", has_text="KV-only candidates — not checked against the GPU")).to_be_visible()
        expect(page.get_by_text("Recommended configurations")).to_have_count(0)

    tab.do(unknown)
    tab.screenshot("sizing-weights-unknown")

    def give_weights(page: Page) -> None:
        with page.expect_response(lambda r: "weights=13.35" in r.url and r.status == 200):
            page.get_by_label("or the weights' size (GiB, or bytes)").fill("13.35 GiB")
            page.get_by_label("or the weights' size (GiB, or bytes)").press("Tab")
        page.wait_for_load_state("networkidle")
        expect(dd(page, "weights")).to_contain_text("14,334,453,350 B (13,670.40 MiB)")
        # As typed (all 41 layers on the GPU) it would not fit; llama-server's --fit keeps some layers in
        # system RAM instead, and the page sizes what it will run.
        expect(page.locator("#results .typed-vs-effective")).to_contain_text(
            "You typed no -ngl; llama-server will run with -ngl"
        )
        expect(page.locator("#server-plan .fit-changes")).to_contain_text("layers in system RAM")
        expect(dd(page, "on the GPU")).to_contain_text("fits")
        expect(page.locator("#results h3", has_text="Recommended configurations")).to_be_visible()
        first = page.locator("ol.recommendations > li > code").first
        expect(first).to_contain_text("-ctk q8_0")  # a quantized KV cache first (ranked by the speed estimate)

    tab.do(give_weights)
    tab.screenshot("sizing-weights-given")
    tab.assert_no_errors()


def test_explaining_c2_x3_says_the_record_and_the_prediction_disagree(tab: Tab, transactional_db: None) -> None:
    import_bench_file(io.BytesIO(investigation_bytes()), filename=FILENAME, origin="command")
    run = Run.objects.get(key="c2-x3")
    tab.open(f"/runs/{run.pk}/")

    def explain(page: Page) -> None:
        page.get_by_role("link", name="explain this run").click()
        page.wait_for_url(re.compile(r"/sizing/\?"))
        expect(page.locator("#results .prediction")).to_contain_text("HTTP 400 exceed_context_size_error")
        record = page.locator("#results .record")
        expect(record).to_contain_text("The record and the prediction disagree: the run measured 3/3 ok")
        expect(record).to_contain_text("with -c 27,648 (3 × 9,216) each slot has 9,216 cells")
        # the run's RTX 5060 Ti is the catalogue's, so the page knows its bandwidth and gives a speed
        expect(page.locator("select[name=gpu]").first).to_have_value("rtx-5060-ti-16gb")
        expect(page.locator("#results")).to_contain_text("Bandwidths: CUDA0 448 GB/s")
        expect(page.locator("#results .needs", has_text="Unknown:")).to_have_count(0)

    tab.do(explain)
    tab.screenshot("sizing-explain-c2-x3")
    tab.assert_no_errors()


def test_the_shared_snapshot_reads_like_the_page(tab: Tab, live_server: Any) -> None:
    query = "&".join(f"{k}={v}" for k, v in DEVSTRAL_16GB.items()) + "&weights=13.35+GiB"
    author = Client()
    author.force_login(User.objects.create_user("ana", password="a-long-test-password"))
    snapshot_path = urlsplit(author.post("/sizing/share/", {"query": query}).url).path
    assert SizingSnapshot.objects.count() == 1

    def result_text(page: Page, scope: str) -> str:
        section = page.locator(scope)
        return section.inner_text().split("Formulas:")[0]

    tab.open(f"/sizing/?{query}")
    live = tab.do(lambda page: result_text(page, "#results"))
    tab.open(snapshot_path)

    def read(page: Page) -> str:
        expect(page.locator("table.caches")).to_be_visible()
        expect(dd(page, "KV total")).to_contain_text("2,684,354,560 B (2,560.00 MiB)")
        expect(page.locator("ol.recommendations > li > code").first).to_contain_text("llama-server -m ")
        expect(page.locator(".prediction")).to_contain_text("need 18,300 cells; the unified pool has 16,384")
        expect(page.locator("pre.report")).not_to_be_visible()  # the plain text is there to copy, folded
        return result_text(page, ".results.snapshot")

    shared = tab.do(read)
    assert shared == live
    tab.screenshot("sizing-snapshot")
    tab.assert_no_errors()


def test_each_recommendation_gives_its_speed_and_headroom_and_a_kvu_twin_is_one_entry(tab: Tab) -> None:
    """The investigation's workload on its GPU, the weights known: every entry says its decode speed, the cells
    each request has spare and the VRAM left; the -kvu twins are one entry; a headroom asked for sizes them."""
    tab.open("/sizing/", {**DEVSTRAL_16GB, "quant": "Q4_K_M"})

    def entries(page: Page) -> list[dict[str, str]]:
        page.wait_for_load_state("networkidle")
        expect(page.locator("#results h3", has_text="Recommended configurations")).to_be_visible()
        return page.locator("ol.recommendations > li").evaluate_all(
            """lis => lis.map(li => ({command: li.querySelector(':scope > code').textContent,
                                      twin: (li.querySelector('.twin') || {}).textContent || '',
                                      facts: (li.querySelector('.facts') || {}).textContent || ''}))"""
        )

    shown = tab.do(entries)
    assert len(shown) >= 3
    for entry in shown:
        assert re.search(r"decode ≈ [\d,.]+ tok/s per request", entry["facts"]), entry
        assert re.search(r"[\d,]+ cells spare per request in (its slot|its share of the unified pool)", entry["facts"])
        assert re.search(r"[\d,.]+ MiB of VRAM left beyond the [\d,]+ MiB margin", entry["facts"]), entry
    ideas = [re.sub(r" -c \d+| -kvu", "", e["command"]) for e in shown]
    assert len(set(ideas)) == len(ideas), ideas  # no two entries differ only in the pool
    assert any("also works with" in e["twin"] and "-kvu" in e["twin"] for e in shown), shown
    tab.screenshot("sizing-speed-and-headroom")

    def ask_for_headroom(page: Page) -> None:
        field(page, "headroom").fill("10")
        page.get_by_role("button", name="Size it").click()
        page.wait_for_url(re.compile(r"headroom=10"))

    tab.do(ask_for_headroom)
    sized = tab.do(entries)
    tab.do(lambda page: expect(field(page, "headroom")).to_have_value("10"))  # the value the result used
    need = 4362 + 1738
    for entry in sized:
        ctx, slots = (int(re.search(flag + r" (\d+)", entry["command"]).group(1)) for flag in ("-c", "-np"))
        per_request = ctx // min(slots, 3) if "-kvu" in entry["command"] else ctx // slots
        assert per_request >= need * 1.1, entry  # each request's cells 10 % over its need
        spare = int(re.search(r"([\d,]+) cells spare", entry["facts"]).group(1).replace(",", ""))
        assert spare >= need // 10, entry
    tab.assert_no_errors()
