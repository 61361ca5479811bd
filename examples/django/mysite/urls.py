from __future__ import annotations

from django.urls import path
from notes import views

urlpatterns = [
    path("", views.index),
    path("slow", views.slow),
]
