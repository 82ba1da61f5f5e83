FROM python:3.11-slim
WORKDIR /app
COPY . /app
RUN pip install --no-cache-dir . && python -m compileall -q /usr/local/lib/python3.11/site-packages
ENTRYPOINT ["biasaudit"]
