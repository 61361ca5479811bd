from __future__ import annotations

from django.urls import path
from probe import views

urlpatterns = [
    path("fast", views.fast),
    path("slow", views.slow),
    path("pid", views.pid),
]
