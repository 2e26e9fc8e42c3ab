#!/usr/bin/env bash
echo alpha > /app/notes.txt
