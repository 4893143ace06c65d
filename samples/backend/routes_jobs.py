"""Read-only job monitoring: ``GET /api/jobs``.

Needs the ``job.read`` permission. Operators also hold ``job.read.all`` and see every tenant's
jobs; everyone else sees only the jobs of their own tenant (their account). Payloads are never
returned, and there is nothing here that changes a job.
"""

from __future__ import annotations

from typing import Annotated

from caravel_samples.backend.accounts import User
from caravel_samples.backend.guards import SignedInRoute, current_user, services
from caravel_samples.backend.models import JobList, JobView, Problem
from fastapi import APIRouter, Depends, HTTPException, Query, Request

router = APIRouter(prefix="/api", tags=["monitoring"], route_class=SignedInRoute)


@router.get(
    "/jobs",
    response_model=JobList,
    responses={403: {"model": Problem, "description": "The account lacks job.read"}},
)
async def list_jobs(
    request: Request,
    user: Annotated[User, Depends(current_user)],
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> JobList:
    """The most recent jobs, newest first, without payloads."""
    if "job.read" not in user.permissions:
        raise HTTPException(403, "the job.read permission is required")
    tenant = None if user.reads_all_tenants else user.tenant_id
    jobs = await services(request).inspector.list_jobs(tenant_id=tenant, limit=limit)
    return JobList(
        items=[
            JobView(
                id=job.job_id,
                job_type=job.job_type,
                state=job.state.value,
                tenant_id=job.tenant_id,
                attempt=job.attempt,
                max_attempts=job.max_attempts,
                due_at=job.due_at,
                created_at=job.created_at,
                started_at=job.started_at,
                finished_at=job.finished_at,
                failure_category=job.last_failure,
            )
            for job in jobs
        ]
    )
