from django.urls import path

from .charts import regression_views, vendor
from .charts import views as chart_views
from .history import views
from .jobs import views as job_views
from .sweeps import calibration_views
from .sweeps import views as sweep_views

urlpatterns = [
    path("", chart_views.home, name="home"),
    path("charts/timeline/", chart_views.timeline, name="chart-timeline"),
    path("charts/compare/", chart_views.compare_chart, name="chart-compare"),
    path("charts/load/", chart_views.load_curve, name="chart-load"),
    path("charts/regressions/", regression_views.regressions, name="chart-regressions"),
    path("vendor/plotly.min.js", vendor.plotly_js, name="plotly-js"),
    path("runs/", views.run_list, name="run-list"),
    path("runs/values/", views.value_suggestions, name="run-values"),
    path("runs/<int:pk>/", views.run_detail, name="run-detail"),
    path("runs/<int:pk>/export.jsonl", views.run_export, name="run-export"),
    path("compare/", views.run_compare, name="run-compare"),
    path("export.jsonl", views.export_download, name="export"),
    path("imports/", views.import_list, name="import-list"),
    path("imports/new/", views.import_upload, name="import-upload"),
    path("imports/<int:pk>/", views.import_detail, name="import-detail"),
    path("servers/", job_views.server_list, name="server-list"),
    path("servers/new/", job_views.server_edit, name="server-new"),
    path("servers/<int:pk>/", job_views.server_detail, name="server-detail"),
    path("servers/<int:pk>/edit/", job_views.server_edit, name="server-edit"),
    path("servers/<int:pk>/probe/", job_views.server_probe, name="server-probe"),
    path("hosts/", sweep_views.host_list, name="host-list"),
    path("hosts/announce/", sweep_views.host_refresh, name="host-refresh"),
    path("hosts/<int:pk>/edit/", sweep_views.host_edit, name="host-edit"),
    path("hosts/<int:pk>/calibrate/", calibration_views.host_calibrate, name="host-calibrate"),
    path("calibrations/<int:pk>/", calibration_views.calibration_detail, name="calibration-detail"),
    path("calibrations/<int:pk>/cancel/", calibration_views.calibration_cancel, name="calibration-cancel"),
    path("sweeps/", sweep_views.sweep_list, name="sweep-list"),
    path("sweeps/new/", sweep_views.sweep_new, name="sweep-new"),
    path("sweeps/demo/", sweep_views.sweep_demo, name="sweep-demo"),
    path("sweeps/<int:pk>/", sweep_views.sweep_detail, name="sweep-detail"),
    path("sweeps/<int:pk>/cancel/", sweep_views.sweep_cancel, name="sweep-cancel"),
    path("jobs/", job_views.job_list, name="job-list"),
    path("jobs/new/", job_views.job_new, name="job-new"),
    path("jobs/<int:pk>/", job_views.job_detail, name="job-detail"),
    path("jobs/<int:pk>/cancel/", job_views.job_cancel, name="job-cancel"),
]
