#!/usr/bin/env bash
echo beta >> /app/notes.txt
